"""KV footprint of live sessions over time: who holds each HBM block of an instance, sampled at an interval.

Off by default (``[footprint] interval_s = 0``): nothing is sampled and no step pays for it (the instances' sample
hook is the plain :meth:`agentreplay.sim.metrics.Recorder.sample`). On, every instance is sampled when a step
starts (:meth:`agentreplay.sim.instance.Instance._begin`, after the scheduler planned it), at most once per
``interval_s`` per instance, into the ``footprint`` table of the simulate output. Each sample splits the
instance's ``total_blocks`` into:

- ``running_blocks``: blocks of the running requests (vLLM ``Scheduler.running``: decoding or prefilling), their
  slots for the step just planned included (vLLM ``KVCacheManager.allocate_slots`` allocates them when the step
  is scheduled); a shared-prefix segment held by several counts once;
- ``idle_blocks``: blocks kept for programs in a tool call: pins (TTL / Continuum retention,
  :mod:`agentreplay.kv.residency`) and histories being written to a host tier, of programs with no call
  running or waiting on the instance; shared segments only they hold;
- ``waiting_blocks``: the rest of the used blocks, so ``running + idle + waiting = used``: waiting requests
  holding slots (KV loading from a host tier or another instance, or loaded: vLLM ``WAITING_FOR_REMOTE_KVS``) and
  the pins of programs whose next call is already waiting here (their KV waits for that call);
- ``cached_free_blocks``: free blocks that still hold a reusable prefix (vLLM's prefix cache: freed blocks keep
  their hash in the LRU free queue until reallocated, ``BlockPool.free_blocks`` / ``FreeKVCacheBlockQueue``);
- ``free_blocks``: free blocks without content (never used, a partial last block, or stale history);
- ``offloaded_blocks``: blocks held in the instance's host tiers (DRAM, CXL), not part of ``total_blocks``.

Bytes: ``block_bytes`` (written to the summary) = block size x the model's KV bytes per token at the run's KV
dtype, over all TP ranks, as the tiers price blocks (:mod:`agentreplay.sim.build`).

Sampling costs O(running + pins + free-queue runs) per sample, paid only when on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentreplay.kv.manager import held_blocks

if TYPE_CHECKING:  # numpy is imported where the columns are built: the experiment's --help needs none
    import numpy as np

#: Columns of the ``footprint`` table, in order.
COLUMNS = (
    "time_s",
    "instance",
    "running_blocks",
    "waiting_blocks",
    "idle_blocks",
    "cached_free_blocks",
    "free_blocks",
    "total_blocks",
    "offloaded_blocks",
)
STATES = ("running", "waiting", "idle", "cached_free", "free")


#: footprint rows kept before a streamed run writes them (one row group)
FLUSH_ROWS = 65_536


class FootprintSampler:
    """Collects footprint rows; :meth:`hook` wraps an instance's sample hook. With a ``sink`` (a streamed run's
    :class:`~agentreplay.sim.stream.ResultStream`) every :data:`FLUSH_ROWS` rows are written to its
    ``footprint`` table and dropped, so a day-long series does not grow in memory; :meth:`finish` writes the rest."""

    def __init__(self, interval_s: float, block_bytes: int, sink: Any = None) -> None:
        self.interval_s = interval_s
        self.block_bytes = block_bytes
        self.rows: list[tuple[float, int, int, int, int, int, int, int, int]] = []
        self._next: dict[int, float] = {}
        self.sink = sink
        self.written = 0  #: rows already written to the sink

    @property
    def samples(self) -> int:
        """Rows sampled so far (written or kept)."""
        return self.written + len(self.rows)

    def hook(self, inner: Any) -> Any:
        """A sample hook calling ``inner`` (the Recorder's) and then :meth:`sample`."""

        def both(inst: Any) -> float:
            return min(inner(inst), self.sample(inst))  # (each hook keeps its own interval)

        return both

    def sample(self, inst: Any) -> float:
        """A footprint row for ``inst``, at most one per ``interval_s``; returns when its next one is due."""
        now = inst.engine.now
        due = self._next.get(inst.index, 0.0)
        if now < due:
            return due
        due = self._next[inst.index] = now + self.interval_s
        self.rows.append((now, inst.index, *split(inst)))
        if self.sink is not None and len(self.rows) >= FLUSH_ROWS:
            self._flush()
        return due

    def _flush(self) -> None:
        cols = self.columns()
        if cols is not None:
            self.sink.write_rows("footprint", cols)
            self.written += len(self.rows)
            self.rows.clear()

    def finish(self) -> dict[str, np.ndarray] | None:
        """The run is over: streamed, write the rows left and return None; else the whole table's columns."""
        if self.sink is not None:
            self._flush()
            return None
        return self.columns()

    def columns(self) -> dict[str, np.ndarray] | None:
        if not self.rows:
            return None
        import numpy as np

        cols = list(zip(*self.rows, strict=True))
        return {
            name: np.asarray(c, dtype=np.float64 if name == "time_s" else np.int64)
            for name, c in zip(COLUMNS, cols, strict=True)
        }


def _shared(r: Any) -> list[Any]:
    """The shared-prefix segments a request holds (the system prefix, or a block-hash chain)."""
    return [r.pfx] if r.pfx is not None else list(r.chain)


def _planned(plan: Any, running: list[Any]) -> dict[int, int]:
    """Per request (by ``id``), the tokens the planned step adds to its KV: its prefill chunk, or one decode slot."""
    extra: dict[int, int] = {}
    if plan is not None:
        for r, n, _ in plan.prefill:
            extra[id(r)] = n
        for r in plan.decode:
            extra[id(r)] = 1
        if plan.cohort:
            for r in running[: plan.cohort]:
                extra[id(r)] = 1
    return extra


def split(inst: Any) -> tuple[int, int, int, int, int, int, int]:
    """``(running, waiting, idle, cached_free, free, total, offloaded)`` blocks of ``inst`` now (module
    docstring); call while the planned step has not been applied (``inst._plan``)."""
    sched, pool, res = inst.sched, inst.pool, inst.residency
    bs = pool.block_size
    running = sched.running
    sched.cohort.sync(running)
    extra = _planned(inst._plan, running)
    shared: dict[int, Any] = {}
    run_blocks = 0
    active = set()
    for r in running:
        active.add(r.program)
        run_blocks += held_blocks(r.computed + extra.get(id(r), 0), r.base, bs) - r.base
        for seg in _shared(r):
            shared[id(seg)] = seg
    for r in sched.waiting:
        active.add(r.program)
        if r.held or r.loading:
            for seg in _shared(r):
                shared.setdefault(id(seg), None)  # held by a waiting request: not idle, not running
    run_blocks += sum(seg.present - seg.base + seg.held_stale for seg in shared.values() if seg is not None)
    idle = 0
    if res is not None:
        seen: set[int] = set()
        for p in res.held_segments():
            if p.program in active or id(p.prog) in seen:
                continue
            seen.add(id(p.prog))
            idle += p.prog.present - p.prog.base + p.prog.held_stale
            for seg in _shared(p):
                if id(seg) not in shared and id(seg) not in seen:
                    seen.add(id(seg))
                    idle += seg.present - seg.base + seg.held_stale
    used = pool.used_blocks
    # free runs that keep a segment's identity (the free queue's runs, a few, not the pool's segment map, which
    # holds a segment per program the instance ever served: ~1,350 a pool against ~3 runs on a 4,000-program day)
    cached_free = sum(run.count for run in pool.queue.runs() if run.seg is not None)
    offloaded = sum(t.used_blocks for t in res.tiers) if res is not None else 0
    return (
        run_blocks,
        used - run_blocks - idle,
        idle,
        cached_free,
        pool.free_blocks - cached_free,
        pool.num_blocks,
        offloaded,
    )
