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
   the first chunk; the first request that cannot be allocated stops admission (FCFS).

The decision is returned as data (:class:`StepPlan`); :class:`~agentreplay.sim.instance.Instance` prices and
applies it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.sim.request import Request

StopReason = Literal["empty", "max_seqs", "no_budget", "no_blocks", "preempted"]


@dataclass(slots=True)
class StepPlan:
    """One iteration: prefill chunks ``(request, tokens, computed_before)`` and decoding requests."""

    prefill: list[tuple[Request, int, int]] = field(default_factory=list)
    decode: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    stop: StopReason = "empty"

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


def held_blocks(tokens: int, base: int, block_size: int) -> int:
    """Blocks a request holds with ``tokens`` slots allocated: the whole shared prefix plus its own blocks."""
    return max(base, -(-tokens // block_size))


class Scheduler:
    """Queues and the per-step decision. Owns ``waiting`` (deque) and ``running`` (admission order)."""

    def __init__(self, pool: SegmentPool, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_prefix_caching: bool = True) -> None:
        self.pool = pool
        self.bs = pool.block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.prefix_caching = enable_prefix_caching
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

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

    def release(self, r: Request) -> None:
        """Free everything ``r`` holds, in vLLM's reverse order (partial block, history, shared prefix)."""
        self.grow_to(r, r.computed)
        self.pool.free_anonymous(r.partial)
        r.partial = 0
        self.pool.release(r.prog)
        if r.pfx is not None:
            self.pool.release(r.pfx)

    def preempt(self, r: Request) -> None:
        self.running.remove(r)
        self.release(r)
        r.computed = 0
        r.preemptions += 1
        self.waiting.appendleft(r)

    # ---- the step ------------------------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self.max_num_batched_tokens
        pool, bs = self.pool, self.bs
        running = self.running
        # Fast path: every running request decodes, the budget covers them and the free blocks cover every
        # block-boundary crossing. Equivalent to the loop below, which it skips.
        if len(running) <= budget:
            need = 0
            for r in running:
                c = r.computed
                if c != r.prompt + r.generated - 1 or not r.generated:
                    break
                if c % bs == 0 and c >= r.base * bs:
                    need += 1
            else:
                if need <= pool.free_blocks:
                    pool.allocate(need)
                    plan.decode = list(running)
                    plan.stop = self._admit(plan, budget - len(running))
                    return plan
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.prompt + r.generated - r.computed, budget)
            need = held_blocks(r.computed + n, r.base, bs) - held_blocks(r.computed, r.base, bs)
            self_preempted = False
            while need > pool.free_blocks:
                victim = running[-1]
                self.preempt(victim)
                plan.preempted.append(victim)
                if victim is r:
                    self_preempted = True
                    break
            if self_preempted:
                break
            pool.allocate(need)
            if r.is_decoding:
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
        pool, bs = self.pool, self.bs
        waiting, running = self.waiting, self.running
        while waiting:
            if len(running) >= self.max_num_seqs:
                return "max_seqs"
            if budget <= 0:
                return "no_budget"
            r = waiting[0]
            total = r.total_tokens
            max_hit = (total - 1) // bs  # vLLM recomputes at least the last token
            pfx_hit = prog_hit = 0
            if self.prefix_caching:
                if r.pfx is not None:
                    pfx_hit = max(0, min(r.pfx.present, r.base, max_hit))
                if pfx_hit == r.base:  # chained hashes: history blocks hit only after the whole prefix
                    bound = min(max_hit, total // bs if r.admitted else r.reuse // bs)
                    prog_hit = pool.hit_blocks(r.prog, bound)
            hit_tokens = (pfx_hit + prog_hit) * bs
            n = min(total - hit_tokens, budget)
            new_blocks = (r.base - pfx_hit) + max(0, -(-(hit_tokens + n) // bs) - r.base - prog_hit)
            evictable = (pool.evictable(r.pfx, pfx_hit) if r.pfx is not None else 0) + \
                pool.evictable(r.prog, prog_hit)
            if not pool.can_allocate(new_blocks, evictable):
                return "no_blocks"
            waiting.popleft()
            if r.pfx is not None:
                pool.touch(r.pfx, pfx_hit)
            pool.touch(r.prog, prog_hit)
            pool.allocate(new_blocks)
            if r.pfx is not None:
                pool.grow(r.pfx, r.base)
            r.computed = hit_tokens
            if not r.admitted:
                r.admitted = True
                r.cached_tokens = hit_tokens
                r.cached_prefix_tokens = pfx_hit * bs
            else:
                r.recomputed_tokens += total - hit_tokens
            running.append(r)
            plan.admitted.append(r)
            plan.prefill.append((r, n, hit_tokens))
            budget -= n
        return "empty"
