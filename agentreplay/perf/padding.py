"""CUDA-graph padding of a batch (the tables of :mod:`agentreplay.perf.deploy`), apart so that it is compiled
with the performance model that pads every step (``setup.py`` HOT; :mod:`agentreplay.perf.deploy` re-exports
both functions)."""

from __future__ import annotations

import bisect


def padding_table(sizes: tuple[int, ...] | list[int]) -> list[int]:
    """``table[n]`` = the capture size a batch of ``n`` tokens runs at (``CudagraphDispatcher
    ._compute_bs_to_padded_graph_size``), for n up to the largest size; empty when ``sizes`` is (eager)."""
    if not sizes:
        return []
    ordered = sorted(set(int(s) for s in sizes))
    if ordered[0] < 1:
        raise ValueError(f"cudagraph capture sizes {list(sizes)} must be >= 1")
    table = [0] * (ordered[-1] + 1)
    for n in range(1, ordered[-1] + 1):
        table[n] = ordered[bisect.bisect_left(ordered, n)]
    return table


def padded_tokens(table: list[int], tokens: int) -> int:
    """Tokens the graph runs for a batch of ``tokens`` (unchanged above the largest capture size)."""
    return table[tokens] if 0 < tokens < len(table) else tokens
