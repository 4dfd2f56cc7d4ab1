"""vLLM v1 batch scheduler for one instance: which tokens of which requests run in the next iteration.

Follows ``vllm/v1/core/sched/scheduler.py::Scheduler.schedule`` (V1 always uses chunked prefill):

1. Running requests in admission order each get ``min(remaining, budget)`` new tokens (1 for a decode, a chunk
   for a request still prefilling); their new KV blocks are allocated (``KVCacheManager.allocate_slots``). If
   blocks run out, the most recently admitted running request is preempted (recompute: its blocks are freed,
   ``num_computed_tokens`` reset, it goes back to the *head* of the waiting queue) and allocation is retried;
   if the request itself was the victim, scheduling of running requests stops.
2. Only if nothing was preempted in this step, waiting requests are admitted in queue order while the token
   budget lasts and fewer than ``max_num_seqs`` run: prefix-cache lookup (longest run of cached full blocks,
   at most ``prompt - 1`` tokens, ``KVCacheManager.get_computed_blocks``), then all-or-nothing allocation for
   the first chunk, admitted only if the whole prompt fits the free blocks (``reserve_full_isl``, vLLM 0.32's
   default ``full_sequence_must_fit``; off = first chunk only); the first request that cannot be allocated stops
   admission (FCFS). Requests whose KV is
   still arriving from another tier are skipped (vLLM ``WAITING_FOR_REMOTE_KVS``).

Policy hooks: the waiting order (:mod:`agentreplay.scheduler.queue`; FCFS keeps vLLM's deque semantics), the
preemption victim (:mod:`agentreplay.scheduler.victim`), and the instance's :class:`~agentreplay.kv.residency.
Residency` (pins released under memory pressure before anything is preempted; loads from host tiers).

Decoding requests live in the instance's :class:`~agentreplay.scheduler.cohort.DecodeCohort`: when the cohort is a
prefix of the running list, the budget covers it and the free blocks cover the whole step, the step is taken for
the cohort as a whole (its block needs and context sum are kept per step in O(1)) and only the requests after
it are visited; otherwise the cohort is dissolved and vLLM's loop runs request by request (same result, tested
against ``lazy_decode=False``).

The decision is returned as data (:class:`StepPlan`); :class:`~agentreplay.sim.instance.Instance` prices and
applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.request import Request
from agentreplay.scheduler.cohort import DecodeCohort

if TYPE_CHECKING:
    from agentreplay.kv.residency import Residency
    from agentreplay.scheduler.queue import QueueOrder
    from agentreplay.scheduler.victim import VictimPolicy

StopReason = Literal["empty", "max_seqs", "no_budget", "no_blocks", "preempted"]


@dataclass(slots=True)
class StepPlan:
    """One iteration: prefill chunks ``(request, tokens, computed_before)``, decoding requests outside the
    cohort, and ``cohort``: how many cohort members decode (all of them, or none)."""

    prefill: list[tuple[Request, int, int]] = field(default_factory=list)
    decode: list[Request] = field(default_factory=list)
    cohort: int = 0
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    loading: list[Request] = field(default_factory=list)  #: admitted to load their KV first (they stay waiting)
    stop: StopReason = "empty"

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode and not self.cohort


def held_blocks(tokens: int, base: int, block_size: int) -> int:
    """Blocks a request holds with ``tokens`` slots allocated: the whole shared prefix plus its own blocks."""
    return max(base, -(-tokens // block_size))


def next_chunk(r: Request, budget: int, block_size: int) -> tuple[int, int, bool]:
    """``(tokens, new blocks, is_decode)`` of a running request's next iteration under ``budget`` tokens (vLLM:
    a decode is one token and needs a new block exactly when its computed tokens fill the last one; a prefill
    chunk is ``min(remaining, budget)`` tokens)."""
    c = r.computed
    remaining = r.prompt + r.generated - c
    if remaining == 1 and r.generated:
        return 1, (1 if c % block_size == 0 and c >= r.base * block_size else 0), True
    n = min(remaining, budget)
    return n, held_blocks(c + n, r.base, block_size) - held_blocks(c, r.base, block_size), False


def _seg_end(r: Request, k: int) -> int:
    """End block (exclusive) of ``r.chain[k]``: the next segment's base, or ``r.base`` for the last."""
    return r.chain[k + 1].base if k + 1 < len(r.chain) else r.base


def _seg_hit(r: Request, k: int, hit: int) -> int:
    """Blocks of ``r.chain[k]`` inside a chain hit of ``hit`` blocks from block 0."""
    seg = r.chain[k]
    return max(0, min(hit, _seg_end(r, k)) - seg.base)


def chain_hit(r: Request, max_hit: int) -> int:
    """Leading blocks of ``r``'s prefix chain cached on this instance (absolute, from block 0), at most ``max_hit``.

    vLLM walks the chained block hashes from the first block and stops at the first miss
    (``KVCacheManager.get_computed_blocks`` -> ``find_longest_cache_hit``): a segment counts only if every
    segment before it is cached whole; within a segment the cached blocks are its leading ``present - base``."""
    hit = 0
    chain = r.chain
    for k in range(len(chain)):
        seg = chain[k]
        end = _seg_end(r, k)
        reach = min(seg.present, end, max_hit)
        if reach < end:
            return max(hit, reach)
        hit = end
    return hit


class Scheduler:
    """Queues and the per-step decision. Owns ``waiting`` (queue order) and ``running`` (admission order)."""

    def __init__(self, pool: SegmentPool, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_prefix_caching: bool = True, *, order: QueueOrder | None = None,
                 victim: VictimPolicy | None = None, residency: Residency | None = None,
                 reserve_full_isl: bool = False, lazy_decode: bool = True) -> None:
        from agentreplay.scheduler.queue import Fcfs
        from agentreplay.scheduler.victim import MostRecent

        self.pool = pool
        self.bs = pool.block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.prefix_caching = enable_prefix_caching
        self.order = order or Fcfs()
        self.victim = victim or MostRecent()
        self.residency = residency
        self.reserve_full_isl = reserve_full_isl
        self.lazy_decode = lazy_decode  #: decoding requests join the cohort (the instance reads this)
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.cohort = DecodeCohort(self.bs)
        self.now = 0.0
        self._run_seq = 0

    # ---- block bookkeeping shared with the instance ------------------------------------------------------
    def grow_to(self, r: Request, tokens: int) -> None:
        """Record that ``r`` has slots for ``tokens`` tokens: full blocks join its history segment.

        Done lazily, when the request releases its blocks: while a request runs, its history segment is held
        (``ref > 0``) and nothing else reads how far it extends. The shared prefix is grown at admission,
        because other requests hit it while this one runs."""
        full = tokens // self.bs
        if full > r.base:
            self.pool.grow(r.prog, full)
        r.partial = 1 if tokens % self.bs and full >= r.base else 0

    def free_partial(self, r: Request) -> None:
        """Bring the history segment up to date and free the partial last block (pins keep the rest)."""
        self.grow_to(r, r.computed)
        self.pool.free_anonymous(r.partial)
        r.partial = 0

    def release_segments(self, r: Request) -> None:
        self.pool.release(r.prog)
        if r.pfx is not None:
            self.pool.release(r.pfx)
        for k in range(len(r.chain) - 1, -1, -1):  # reverse order, like the blocks
            self.pool.release(r.chain[k])

    def release(self, r: Request) -> None:
        """Free everything ``r`` holds, in vLLM's reverse order (partial block, history, shared prefix)."""
        self.free_partial(r)
        self.release_segments(r)

    def preempt(self, r: Request) -> None:
        assert not r.lazy, "dissolve the decode cohort before preempting"
        self.running.remove(r)
        self.release(r)
        r.computed = 0
        r.held = False
        r.preemptions += 1
        if self.order.sorted:
            self.waiting.append(r)
        else:
            self.waiting.insert(0, r)

    def relieve(self) -> bool:
        """Nothing runs and nothing waiting can be admitted: free memory held outside the running set (a pin,
        else the blocks of the last waiting request holding loaded KV, which is reset as if preempted).
        Returns False when there is nothing to free."""
        if self.residency is not None and self.residency.release_oldest_pin(exclude=-1, force=True):
            return True
        for r in reversed(self.waiting):
            if r.held and not r.loading:
                self.release(r)
                r.computed = 0
                r.held = False
                return True
        return False

    def _room(self, need: int, evictable: int, program: int) -> bool:
        """Is there room for ``need`` new blocks? Releases pins of other programs under pressure first."""
        while not self.pool.can_allocate(need, evictable):
            if self.residency is None or not self.residency.release_oldest_pin(exclude=program):
                return False
        return True

    # ---- the step ------------------------------------------------------------------------------------------
    def schedule(self, now: float = 0.0) -> StepPlan:
        self.now = now
        plan = StepPlan()
        budget = self.max_num_batched_tokens
        pool, bs = self.pool, self.bs
        running = self.running
        co = self.cohort
        # Fast path: the cohort (decoding requests, lazily advanced) is a prefix of the running list and the
        # budget covers it; the requests after it are scheduled as the loop below would, and the free blocks
        # cover the whole step. Then nothing is preempted and the result equals the loop's, at a cost that does
        # not grow with the cohort.
        n_dec = co.n
        tail = len(running)
        while tail > n_dec and not running[tail - 1].lazy:
            tail -= 1
        if tail == n_dec and n_dec <= budget:
            need = co.need()
            left = budget - n_dec
            prefill: list[tuple[Request, int, int]] = []
            decode: list[Request] = []
            for j in range(n_dec, len(running)):
                if left <= 0:
                    break
                r = running[j]
                n, blocks, is_decode = next_chunk(r, left, bs)
                need += blocks
                if is_decode:
                    decode.append(r)
                else:
                    prefill.append((r, n, r.computed))
                left -= n
            if need <= pool.free_blocks:
                if need:
                    pool.allocate(need)
                plan.prefill, plan.decode, plan.cohort = prefill, decode, n_dec
                plan.stop = self._admit(plan, left)
                return plan
        # General path (vLLM's loop, with preemption): every request is handled one by one.
        if n_dec:
            co.dissolve(running)
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n, need, is_decode = next_chunk(r, budget, bs)
            self_preempted = False
            while need > pool.free_blocks and not self._room(need, 0, r.program):
                # victims come from the not-yet-scheduled part (vLLM FCFS pops the tail; its priority mode
                # may also pick an already scheduled request and unschedule it, which we do not model)
                victim = self.victim.pick(running[i:], self.order, now)
                self.preempt(victim)
                plan.preempted.append(victim)
                if victim is r:
                    self_preempted = True
                    break
            if self_preempted:
                break  # vLLM: "No more request to schedule"
            if need:
                pool.allocate(need)
            if is_decode:
                plan.decode.append(r)
            else:
                plan.prefill.append((r, n, r.computed))
            budget -= n
            i += 1
        if plan.preempted:
            plan.stop = "preempted"
            return plan
        plan.stop = self._admit(plan, budget)
        return plan

    def _admit(self, plan: StepPlan, budget: int) -> StopReason:
        waiting, running = self.waiting, self.running
        if not waiting:
            return "empty"
        pool, bs = self.pool, self.bs
        full_isl = self.reserve_full_isl
        if self.order.sorted and len(waiting) > 1:
            now = self.now
            waiting.sort(key=lambda r: self.order.key(r, now))
        if len(running) >= self.max_num_seqs:
            return "max_seqs"
        if budget <= 0:
            return "no_budget"
        # Blocks the in-flight prefills (those scheduled in this step, admissions included; requests loading from
        # an earlier step are not counted) still need for the rest of their prompts. vLLM 0.32 keeps them free
        # only for an admission that starts an async KV load (``Scheduler.schedule``: ``reserved_blocks =
        # _inflight_prefill_reserved_blocks()`` when ``load_kv_async``); its full-sequence gate
        # (``KVCacheManager.allocate_slots(full_sequence_must_fit)``) checks the request alone.
        inflight = sum(held_blocks(x.total_tokens, x.base, bs) - held_blocks(before + n, x.base, bs)
                       for x, n, before in plan.prefill)
        i = 0
        while i < len(waiting):
            if len(running) >= self.max_num_seqs:
                return "max_seqs"
            if budget <= 0:
                return "no_budget"
            r = waiting[i]
            if r.loading:
                i += 1
                continue
            if r.held:  # KV arrived from another tier: blocks for the loaded part are already held
                n = min(r.total_tokens - r.computed, budget)
                need = held_blocks(r.computed + n, r.base, bs) - held_blocks(r.computed, r.base, bs)
                rest = held_blocks(r.total_tokens, r.base, bs) - held_blocks(r.computed + n, r.base, bs)
                if not self._room(need + (rest if full_isl else 0), 0, r.program):
                    return "no_blocks"
                inflight += rest
                pool.allocate(need)
                r.held = False
                del waiting[i]
                self._run_seq += 1
                r.run_seq = self._run_seq
                running.append(r)
                plan.admitted.append(r)
                plan.prefill.append((r, n, r.computed))
                budget -= n
                continue
            total = r.total_tokens
            max_hit = (total - 1) // bs  # vLLM recomputes at least the last token
            pfx_hit = prog_hit = 0
            bound = max_hit
            if self.prefix_caching:
                if r.pfx is not None:
                    pfx_hit = max(0, min(r.pfx.present, r.base, max_hit))
                elif r.chain:
                    pfx_hit = chain_hit(r, max_hit)
                bound = min(max_hit, total // bs if r.admitted else r.reuse // bs)
                if pfx_hit == r.base:  # chained hashes: history blocks hit only after the whole prefix
                    prog_hit = pool.hit_blocks(r.prog, bound)
            hit_tokens = (pfx_hit + prog_hit) * bs
            ext_source, ext_blocks, link = ("", 0, None)
            if self.residency is not None and pfx_hit == r.base and self.prefix_caching:
                ext_source, ext_blocks, link = self.residency.external_hit(r, r.base + prog_hit, bound)
            evictable = (pool.evictable(r.pfx, pfx_hit) if r.pfx is not None else 0) + \
                pool.evictable(r.prog, prog_hit)
            chain = r.chain
            for k in range(len(chain)):
                evictable += pool.evictable(chain[k], _seg_hit(r, k, pfx_hit))
            if ext_blocks > 0:
                n = 0  # load first; compute in a later step (vLLM allocates the external tokens' slots now)
                new_blocks = (r.base - pfx_hit) + ext_blocks
            else:
                n = min(total - hit_tokens, budget)
                new_blocks = (r.base - pfx_hit) + max(0, -(-(hit_tokens + n) // bs) - r.base - prog_hit)
            full = (r.base - pfx_hit) + max(0, -(-total // bs) - r.base - prog_hit)
            check = full if full_isl else new_blocks  # the whole sequence must fit now (full_sequence_must_fit)
            if ext_blocks > 0:  # an async load keeps the in-flight prefills' blocks free
                check = max(check, new_blocks + inflight)
            if not self._room(check, evictable, r.program):
                return "no_blocks"
            inflight += full - new_blocks
            if r.pfx is not None:
                pool.touch(r.pfx, pfx_hit)
            for k in range(len(chain)):
                pool.touch(chain[k], _seg_hit(r, k, pfx_hit))
            pool.touch(r.prog, prog_hit)
            pool.allocate(new_blocks)
            if r.pfx is not None:
                pool.grow(r.pfx, r.base)
            for k in range(len(chain)):
                pool.grow(chain[k], _seg_end(r, k))
            if self.residency is not None:
                self.residency.consume_pin(r)
            r.computed = hit_tokens
            if not r.admitted:
                r.admitted = True
                r.cached_tokens = hit_tokens
                r.cached_prefix_tokens = pfx_hit * bs
            else:
                r.recomputed_tokens += total - hit_tokens - ext_blocks * bs
            if ext_blocks > 0:
                assert self.residency is not None and link is not None
                r.held = True
                self.residency.load(r, ext_source, ext_blocks, link)
                plan.loading.append(r)
                i += 1
                continue
            del waiting[i]
            self._run_seq += 1
            r.run_seq = self._run_seq
            running.append(r)
            plan.admitted.append(r)
            plan.prefill.append((r, n, hit_tokens))
            budget -= n
        return "empty"
