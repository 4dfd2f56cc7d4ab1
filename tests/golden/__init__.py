"""Golden test: the simulator's outputs on the bundled trace under every preset, pinned as digests
(:mod:`tests.golden.cases`; regenerate with ``python -m tests.golden.regen`` only for an intended change)."""
