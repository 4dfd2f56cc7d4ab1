"""Live collector: drive a real OpenAI-compatible engine with a trace's programs and write what it measured.

- :func:`collectors.live.driver.drive` replays programs (exact token counts, prefix structure, tool gaps, the
  simulator's arrival modes) and writes one end-to-end cell in the measured schema;
- :func:`collectors.live.profile.profile` measures the engine's prefill and decode iteration times into the
  measured schema's ``component`` table.
"""
