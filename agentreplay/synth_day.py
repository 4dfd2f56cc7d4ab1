"""A day of synthetic agent programs as a compact :class:`~agentreplay.sim.workload.Workload`, generated in chunks.

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
    sizes = [min(chunk_programs, n_programs - k * chunk_programs) for k in range(n_chunks)]
    # Turn counts first (a chunk's first draw is its templates: the same generator redrawn gives them), so the
    # arrays are allocated once at their final size and each chunk is copied into its slice: no chunk pieces
    # outlive their chunk (kept pieces interleaved with the draw's temporaries left the heap fragmented: 3.1 GB
    # resident for 1 M programs whose arrays are 1.2 GB).
    n_turns = np.concatenate(
        [
            source.n_turns[np.random.default_rng(seeds[k]).integers(0, len(source.n_turns), m)]
            for k, m in enumerate(sizes)
        ]
    )
    start = np.zeros(n_programs + 1, dtype=np.int64)
    np.cumsum(n_turns, out=start[1:])
    del n_turns
    total = int(start[-1])
    inp, out, reused = (mapped(total, np.int64) for _ in range(3))
    tool_s = mapped(total, np.float64)
    prefix = np.empty(n_programs, dtype=np.int64)
    tool_class: list[str] = [""] * total
    task_ids: list[str] = []
    prefix_ids: list[str | None] = []
    for k, m in enumerate(sizes):
        d = draw(source, m, np.random.default_rng(seeds[k]), jitter=jitter, neighbourhood=neighbourhood)
        p0 = k * chunk_programs
        lo, hi = int(start[p0]), int(start[p0 + m])
        assert hi - lo == len(d.row)
        inp[lo:hi] = d.input_tokens
        np.maximum(d.output_tokens, 1, out=out[lo:hi])
        reused[lo:hi] = d.reused_tokens
        tool_s[lo:hi] = d.tool_duration_s
        prefix[p0 : p0 + m] = np.minimum(d.prefix_tokens, np.minimum.reduceat(d.input_tokens, d.offsets[:-1]))
        tpl = d.template.tolist()
        task_ids.extend([task_src[t] for t in tpl])
        prefix_ids.extend([pfx_src[t] for t in tpl])
        tool_class[lo:hi] = d.tool_class.tolist()
        del d
    return Workload(
        program_ids=[f"{SOURCE}/{i:06d}" for i in range(n_programs)],
        task_ids=task_ids,
        turn_start=start,
        input_tokens=inp,
        output_tokens=out,
        reused_tokens=reused,
        tool_s=tool_s,
        tool_class=tool_class,
        arrival_s=np.full(n_programs, np.nan),
        prefix_ids=prefix_ids,
        prefix_tokens=prefix,
    )


def mapped(n: int, dtype: type) -> np.ndarray:
    """An array of ``n`` items in its own anonymous memory map: a streamed run hands the pages of finished
    programs' turns back to the system (:func:`agentreplay.sim.stream.release_turns`)."""
    import mmap

    size = max(n * np.dtype(dtype).itemsize, 1)
    return np.frombuffer(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE), dtype=dtype, count=n)  # (shared: kept)
