"""A day of synthetic agent programs as a compact :class:`~agentreplay.sim.workload.Workload`, generated in chunks
(issue 20, "a day of a large fleet").

:func:`agentreplay.synth.synthesize` builds a pandas ``Trace`` (15 columns per turn, a program-id string per
turn) that :func:`~agentreplay.sim.workload.compile_trace` then flattens: for 1,000,000 programs (40 M turns) the
intermediate frames alone exceed this machine's memory. :func:`day_workload` draws the same programs (the same
per-program method, :func:`agentreplay.synth.draw`) ``chunk_programs`` at a time and keeps only what the simulator
reads: four numbers per turn (input, output, reused tokens, tool seconds) and the tool class (a reference to one
of a handful of interned strings), about 40 bytes a turn.

Seeding: chunk ``k`` draws from ``numpy.random.default_rng(SeedSequence(seed).spawn(n_chunks)[k])``, so a chunk
does not depend on how many programs the others drew; the result depends on ``chunk_programs`` (another split is
another stream of random numbers: equality with a one-chunk run is impossible, the distribution is the same,
``tests/test_synth_day.py`` checks both: per chunk the arrays are exactly those of ``synthesize`` given the
chunk's generator, and across chunk sizes the marginal distributions agree).
"""

from __future__ import annotations

import numpy as np

from agentreplay.sim.workload import Workload
from agentreplay.synth import SOURCE, Source, check, draw
from agentreplay.trace.io import Trace

#: programs drawn at a time: the draw's temporaries (about 15 arrays of 8 bytes per turn) stay near 200 MB
CHUNK_PROGRAMS = 50_000


def day_workload(
    trace: Trace,
    n_programs: int,
    *,
    seed: int = 0,
    chunk_programs: int = CHUNK_PROGRAMS,
    jitter: float = 0.1,
    neighbourhood: float = 0.05,
) -> Workload:
    """``n_programs`` synthetic programs following ``trace`` (method: :mod:`agentreplay.synth`), compiled as
    :func:`~agentreplay.sim.workload.compile_trace` compiles a synthetic trace (ids ``synthetic/NNNNNN``, no
    arrival times, output tokens at least 1, shared prefix capped at the program's smallest prompt)."""
    check(n_programs, jitter, neighbourhood)
    if chunk_programs < 1:
        raise ValueError(f"chunk_programs must be >= 1, got {chunk_programs}")
    source = Source.of(trace)
    n_chunks = -(-n_programs // chunk_programs)
    seeds = np.random.SeedSequence(seed).spawn(n_chunks)
    task_src = source.progs["task_id"].tolist()
    pfx_src = [None if v is None or v != v else str(v) for v in source.progs["shared_prefix_id"].tolist()]
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("n", "inp", "out", "reused", "tool", "prefix")}
    task_ids: list[str] = []
    prefix_ids: list[str | None] = []
    tool_class: list[str] = []
    for k in range(n_chunks):
        m = min(chunk_programs, n_programs - k * chunk_programs)
        d = draw(source, m, np.random.default_rng(seeds[k]), jitter=jitter, neighbourhood=neighbourhood)
        parts["n"].append(d.n_turns)
        parts["inp"].append(d.input_tokens)
        parts["out"].append(np.maximum(d.output_tokens, 1))
        parts["reused"].append(d.reused_tokens)
        parts["tool"].append(d.tool_duration_s)
        parts["prefix"].append(np.minimum(d.prefix_tokens, np.minimum.reduceat(d.input_tokens, d.offsets[:-1])))
        tpl = d.template.tolist()
        task_ids.extend([task_src[t] for t in tpl])
        prefix_ids.extend([pfx_src[t] for t in tpl])
        tool_class.extend(d.tool_class.tolist())
        del d
    start = np.zeros(n_programs + 1, dtype=np.int64)
    np.cumsum(np.concatenate(parts.pop("n")), out=start[1:])
    cols = {k: np.concatenate(parts.pop(k)) for k in list(parts)}  # one column's chunks freed at a time
    return Workload(
        program_ids=[f"{SOURCE}/{i:06d}" for i in range(n_programs)],
        task_ids=task_ids,
        turn_start=start,
        input_tokens=cols["inp"],
        output_tokens=cols["out"],
        reused_tokens=cols["reused"],
        tool_s=cols["tool"],
        tool_class=tool_class,
        arrival_s=np.full(n_programs, np.nan),
        prefix_ids=prefix_ids,
        prefix_tokens=cols["prefix"],
    )
