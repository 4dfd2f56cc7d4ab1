"""Run-length KV block pool: vLLM v1 prefix caching at the cost of O(segments), not O(blocks), per operation.

Why a second pool. :mod:`agentreplay.kv.block_pool` models vLLM's ``BlockPool`` block by block; an agent
turn holds ~1,000 blocks (16.5k prompt tokens on average in the bundled trace), so a block-level pool costs
~20 M block operations per 500-program replay. This pool represents the same state by *segments* and
*runs* and gives the same answers (a Hypothesis test drives both pools with the same operations and
compares hits and free counts):

- A **segment** is a stretch of context with one identity (DESIGN §3): the shared system prefix of a run
  (``("prefix", id)``, blocks ``[0, base)``) or one program's append-only history
  (``("prog", id)``, blocks ``[base, ...)``). ``present`` is the end of the contiguous run of cached full
  blocks from the segment's start. A block straddling the prefix/history boundary belongs to the program.
- The **free queue** (vLLM ``FreeKVCacheBlockQueue``) holds free blocks in LRU order, head = next to be
  reused. vLLM frees a request's blocks in reverse order (``KVCacheManager.free``: "so that the tail
  blocks are evicted first"), so the blocks a request releases form one *run* per segment whose head end is
  the segment's highest block. Reusing ``m`` blocks from a run's head therefore evicts the segment's top
  ``m`` blocks: ``present -= m``. The segment stays a contiguous prefix, which is what makes run-length
  encoding exact. Blocks without identity (a request's partial last block, or stale blocks whose content
  the program's history no longer matches) form anonymous runs.
- A prefix hit (``touch``) takes the hit blocks out of the middle of the queue (vLLM
  ``BlockPool.touch``); vLLM admission checks ``blocks_to_allocate <= free - evictable_hits``
  (``KVCacheManager.allocate_slots``), reproduced in :meth:`SegmentPool.can_allocate`.

Approximation (documented, deliberate): when a request allocates the missing blocks of a *shared prefix*
segment, they count as cached at once, so a second request admitted in the same step hits them; vLLM
registers them at the same point (allocation caches the blocks that will be full after the step), so the
two agree except for a request admitted in the very same scheduler step.

Invariants (:meth:`SegmentPool.check`): ``free + used == num_blocks``; ``free`` = sum of run counts; a
segment with ``ref > 0`` has no run in the queue; a segment's run covers exactly its cached blocks.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Run:
    """Free blocks contiguous in the LRU queue: a segment's cached blocks, or anonymous blocks."""

    count: int
    seg: Segment | None
    prev: Run | None = None
    next: Run | None = None

    # written out, not left to @dataclass: mypyc compiles this one; the dataclass-generated __init__ runs
    # interpreted (tests/sim/test_native.py checks it against the fields)
    def __init__(
        self,
        count: int,
        seg: Segment | None,
        prev: Run | None = None,
        next: Run | None = None,
    ) -> None:
        self.count = count
        self.seg = seg
        self.prev = prev
        self.next = next


@dataclass(slots=True, eq=False)
class Segment:
    """One identity of context (shared prefix or a program's history); blocks ``[base, present)`` cached."""

    key: Hashable
    base: int
    present: int
    ref: int = 0
    run: Run | None = None
    #: blocks cut off by a touch while earlier references (a pin, an offload write, requests on the shared
    #: prefix) still held them; no longer part of the segment, they go to the queue at the next release
    held_stale: int = 0

    # written out, not left to @dataclass: mypyc compiles this one; the dataclass-generated __init__ runs
    # interpreted (tests/sim/test_native.py checks it against the fields)
    def __init__(
        self,
        key: Hashable,
        base: int,
        present: int,
        ref: int = 0,
        run: Run | None = None,
        held_stale: int = 0,
    ) -> None:
        self.key = key
        self.base = base
        self.present = present
        self.ref = ref
        self.run = run
        self.held_stale = held_stale

    @property
    def cached_blocks(self) -> int:
        return self.present - self.base


class FreeQueue:
    """Doubly linked list of runs; O(1) append, pop-from-head, and removal of a run from the middle."""

    __slots__ = ("blocks", "head", "tail")

    def __init__(self) -> None:
        self.head: Run | None = None
        self.tail: Run | None = None
        self.blocks = 0

    def append(self, run: Run) -> None:
        run.prev, run.next = self.tail, None
        if self.tail is None:
            self.head = run
        else:
            self.tail.next = run
        self.tail = run
        self.blocks += run.count

    def appendleft(self, run: Run) -> None:
        run.prev, run.next = None, self.head
        if self.head is None:
            self.tail = run
        else:
            self.head.prev = run
        self.head = run
        self.blocks += run.count

    def remove(self, run: Run) -> None:
        if run.prev is None:
            self.head = run.next
        else:
            run.prev.next = run.next
        if run.next is None:
            self.tail = run.prev
        else:
            run.next.prev = run.prev
        run.prev = run.next = None
        self.blocks -= run.count

    def runs(self) -> list[Run]:
        out, r = [], self.head
        while r is not None:
            out.append(r)
            r = r.next
        return out


@dataclass(slots=True)
class PoolStats:
    evicted_blocks: int = 0
    allocated_blocks: int = 0


@dataclass(slots=True, eq=False)
class SegmentPool:
    """KV block pool of one instance, ``num_blocks`` blocks of ``block_size`` tokens."""

    num_blocks: int
    block_size: int = 16
    #: Current vLLM returns freed blocks that have no hash (a request's partial last block) to the *head* of
    #: the free queue, since they can never be hit (``BlockPool.free_blocks``); older releases appended them.
    fresh_blocks_first: bool = True
    queue: FreeQueue = field(default_factory=FreeQueue)
    segments: dict[Hashable, Segment] = field(default_factory=dict)
    stats: PoolStats = field(default_factory=PoolStats)

    def __post_init__(self) -> None:
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")
        self.queue.append(Run(self.num_blocks, None))

    # ---- queries -------------------------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        return self.queue.blocks

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.queue.blocks

    def segment(self, key: Hashable, base: int) -> Segment:
        seg = self.segments.get(key)
        if seg is None:
            seg = self.segments[key] = Segment(key, base, base)
        return seg

    def hit_blocks(self, seg: Segment, upto: int) -> int:
        """Leading cached blocks of ``seg`` usable by a request that may hit blocks ``[seg.base, upto)``."""
        return max(0, min(seg.present, upto) - seg.base)

    def evictable(self, seg: Segment, hit: int) -> int:
        """Blocks of a ``hit`` on ``seg`` that currently sit in the free queue (they stop being free)."""
        return hit if seg.ref == 0 and seg.run is not None else 0

    def can_allocate(self, new_blocks: int, evictable_hits: int) -> bool:
        """vLLM ``allocate_slots`` check: new blocks must fit in the free blocks not about to be touched."""
        return new_blocks <= self.queue.blocks - evictable_hits

    # ---- mutations -----------------------------------------------------------------------------------
    def touch(self, seg: Segment, hit: int) -> None:
        """Take a reference on ``seg`` keeping its first ``hit`` cached blocks; the rest become stale.

        Blocks of ``seg`` beyond the hit (history the request's prompt no longer matches, or beyond what the
        request can hit) lose their identity: they stay in the queue where they were, as anonymous blocks.
        If ``seg`` is already held, the blocks beyond the hit stay referenced by the earlier holders only: a pin
        or an offload write keeping the previous call's history of a divergent turn, or other requests holding
        the shared prefix when this request's hit stops inside it (``max_hit`` below the prefix, prefix caching
        off), where vLLM computes duplicates of those blocks. They leave the segment now (the request's new
        blocks take their place) and are freed, as anonymous blocks at the queue tail, at the next
        :meth:`release` (vLLM frees them when their holder drops its references; the scheduler drops a pin
        right after admitting the program's next call).
        """
        keep_to = seg.base + hit
        if seg.ref == 0 and seg.run is not None:
            run = seg.run
            stale = seg.present - keep_to
            if stale <= 0:
                self.queue.remove(run)
            else:
                run.seg = None
                self.queue.blocks -= run.count - stale
                run.count = stale
            seg.run = None
        elif seg.ref > 0 and keep_to < seg.present:
            seg.held_stale += seg.present - keep_to
        seg.present = min(seg.present, keep_to)
        seg.ref += 1

    def allocate(self, n: int) -> None:
        """Take ``n`` blocks from the queue head, evicting the cached blocks they held (LRU)."""
        if n > self.queue.blocks:
            raise RuntimeError(f"allocate({n}) with only {self.queue.blocks} free blocks")
        self.stats.allocated_blocks += n
        q = self.queue
        while n > 0:
            run = q.head
            assert run is not None
            take = min(n, run.count)
            if run.seg is not None:
                run.seg.present -= take
                self.stats.evicted_blocks += take
            if take == run.count:
                q.remove(run)
                if run.seg is not None:
                    run.seg.run = None
            else:
                run.count -= take
                q.blocks -= take
            n -= take

    def grow(self, seg: Segment, new_present: int) -> None:
        """``seg`` (held) now has cached full blocks up to ``new_present`` (blocks filled by the request)."""
        if new_present > seg.present:
            seg.present = new_present

    def release(self, seg: Segment) -> None:
        """Drop one reference; at zero, the segment's cached blocks join the queue tail as one run."""
        if seg.ref <= 0:
            raise RuntimeError(f"release of segment {seg.key!r} with ref {seg.ref}")
        seg.ref -= 1
        if seg.held_stale:  # above the segment's blocks, so freed first (reverse order)
            self.queue.append(Run(seg.held_stale, None))
            seg.held_stale = 0
        if seg.ref == 0 and seg.present > seg.base:
            seg.run = Run(seg.present - seg.base, seg)
            self.queue.append(seg.run)

    def free_anonymous(self, n: int) -> None:
        """Return ``n`` blocks without identity (partial last blocks) to the queue (head or tail, see
        ``fresh_blocks_first``)."""
        if n > 0:
            if self.fresh_blocks_first:
                self.queue.appendleft(Run(n, None))
            else:
                self.queue.append(Run(n, None))

    def drop(self, seg: Segment) -> None:
        """Forget ``seg``'s identity (e.g. a finished program): its free blocks become anonymous."""
        if seg.ref == 0 and seg.run is not None:
            seg.run.seg = None
            seg.run = None
        seg.present = seg.base
        self.segments.pop(seg.key, None)

    # ---- checks ----------------------------------------------------------------------------------------
    def check(self, held_by_requests: int | None = None) -> None:
        """Assert the invariants; ``held_by_requests`` = blocks the caller believes are in use."""
        runs = self.queue.runs()
        assert sum(r.count for r in runs) == self.queue.blocks, "free count != sum of runs"
        assert all(r.count > 0 for r in runs), "empty run in queue"
        assert 0 <= self.queue.blocks <= self.num_blocks
        for seg in self.segments.values():
            assert seg.ref >= 0, f"negative ref on {seg.key!r}"
            assert seg.present >= seg.base, f"present below base on {seg.key!r}"
            assert seg.held_stale >= 0 and (seg.ref > 0 or not seg.held_stale), f"held_stale on {seg.key!r}"
            if seg.ref > 0:
                assert seg.run is None, f"held segment {seg.key!r} has blocks in the free queue"
            elif seg.run is not None:
                assert seg.run.seg is seg and seg.run.count == seg.present - seg.base
        if held_by_requests is not None:
            assert held_by_requests == self.used_blocks, (held_by_requests, self.used_blocks)
