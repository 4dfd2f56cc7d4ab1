"""vLLM v1 batch scheduler for one instance: which tokens of which requests run in the next iteration.

Follows ``vllm/v1/core/sched/scheduler.py::Scheduler.schedule`` (V1 always uses chunked prefill):

1. Running requests in admission order each get ``min(remaining, budget)`` new tokens (1 for a decode, a chunk
   for a request still prefilling; a decode takes ``decode_tokens`` of the budget, ``1 + k`` under speculative
   decoding with ``k`` drafts: vLLM's ``num_new_tokens = num_tokens_with_spec - num_computed_tokens``, fewer drafts
   when the budget left is smaller); their new KV blocks are allocated (``KVCacheManager.allocate_slots``). If
   blocks run out, the most recently admitted running request is preempted (recompute: its blocks are freed,
   ``num_computed_tokens`` reset, it goes back to the *head* of the waiting queue) and allocation is retried;
   if the request itself was the victim, scheduling of running requests stops.
2. Only if nothing was preempted in this step, waiting requests are admitted in queue order while the token
   budget lasts and fewer than ``max_num_seqs`` run: prefix-cache lookup (longest run of cached full blocks,
   at most ``prompt - 1`` tokens, ``KVCacheManager.get_computed_blocks``), then all-or-nothing allocation for
   the first chunk, admitted only if the whole prompt fits the free blocks (``reserve_full_isl``, vLLM 0.32's
   default ``full_sequence_must_fit``; off = first chunk only); the first request that cannot be allocated stops
   admission (FCFS). Requests whose KV is still arriving from another tier are skipped (``WAITING_FOR_REMOTE_KVS``).

Policy hooks: the waiting order (:mod:`agentreplay.scheduler.queue`; FCFS keeps vLLM's deque semantics) and the
preemption victim (:mod:`agentreplay.scheduler.victim`). Every block question and block operation goes through the
instance's :class:`~agentreplay.kv.manager.KVManager` (prefix hits, tier hits, capacity with pins released under
memory pressure before anything is preempted, allocation, freeing, tool-gap retention), as vLLM's scheduler goes
through ``KVCacheManager``.

Decoding requests live in the instance's :class:`~agentreplay.scheduler.cohort.DecodeCohort`: when the cohort is a
prefix of the running list, the budget covers it and the free blocks cover the whole step, the step is taken for
the cohort as a whole (its block needs and context sum are kept per step in O(1)) and only the requests after
it are visited; otherwise the cohort is dissolved and vLLM's loop runs request by request (same result, tested
against ``lazy_decode=False``).

The decision is returned as data (:class:`StepPlan`); :class:`~agentreplay.sim.instance.Instance` prices it and
schedules its end, and the scheduler applies it then (:meth:`Scheduler.update_from_output`, as vLLM's: tokens
computed and emitted, finished requests freed in the running list's order through the retention policy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentreplay.kv.manager import KVManager, held_blocks
from agentreplay.request import Request
from agentreplay.scheduler.cohort import DecodeCohort
from agentreplay.scheduler.plan import StepPlan, StopReason, unschedule
from agentreplay.scheduler.queue import Fcfs, QueueOrder
from agentreplay.scheduler.victim import MostRecent, VictimPolicy


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


class Scheduler:
    """Queues, the per-step decision and its application. Owns ``waiting`` (queue order) and ``running``
    (admission order); every block goes through ``kv`` (:class:`~agentreplay.kv.manager.KVManager`).

    ``index`` and ``log`` name the instance in the decision log (admissions, preemptions, retention);
    ``recompute_s(tokens)`` prices a prefill of ``tokens`` (retention policies weigh it).

    ``decode_tokens``: the token budget a decoding request takes per step, 1 without speculation; with ``k``
    speculative tokens ``1 + k`` (vllm/v1/core/sched/scheduler.py ``Scheduler.schedule``: a running request is
    scheduled ``num_tokens_with_spec + num_output_placeholders - num_computed_tokens`` tokens, its emitted token's
    position plus its drafts, capped by the budget left: a request reached when less is left is scheduled with
    fewer drafts). Its KV still grows one slot per step here (:mod:`agentreplay.features.speculation.speculative`)."""

    def __init__(
        self,
        kv: KVManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        *,
        order: QueueOrder | None = None,
        victim: VictimPolicy | None = None,
        reserve_full_isl: bool = False,
        lazy_decode: bool = True,
        decode_tokens: int = 1,
        index: int = 0,
        log: Callable[[dict[str, Any]], None] | None = None,
        recompute_s: Callable[[int], float] | None = None,
    ) -> None:
        self.kv = kv
        self.pool = kv.pool
        self.bs = kv.bs
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.prefix_caching = kv.prefix_caching
        self.order: QueueOrder = order or Fcfs()
        self.victim: VictimPolicy = victim or MostRecent()
        self._whole = bool(getattr(self.victim, "whole_running", False))  #: victims from the whole running list
        self.reserve_full_isl = reserve_full_isl
        self.lazy_decode = lazy_decode  #: decoding requests join the cohort
        if decode_tokens < 1:
            raise ValueError(f"Scheduler decode_tokens={decode_tokens} must be >= 1 (one token, plus drafts)")
        self.decode_tokens = decode_tokens  #: budget a decode takes per step (1 + speculative tokens)
        self.index = index
        self.log = log
        self.recompute_s = recompute_s
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.cohort = DecodeCohort(self.bs)
        self.now = 0.0
        self._run_seq = 0
        self._spare: StepPlan | None = None  #: a plan handed back by :meth:`recycle`, reused by the next step

    def preempt(self, r: Request) -> None:
        assert not r.lazy, "dissolve the decode cohort before preempting"
        _remove(self.running, r)
        self.kv.free(r)
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
        if self.kv.release_oldest_pin(force=True):
            return True
        for r in reversed(self.waiting):
            if r.held and not r.loading:
                self.kv.free(r)
                r.computed = 0
                r.held = False
                return True
        return False

    # ---- the step ------------------------------------------------------------------------------------------
    def schedule(self, now: float = 0.0) -> StepPlan:
        self.now = now
        plan = self._new_plan()
        budget = self.max_num_batched_tokens
        kv, bs = self.kv, self.bs
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
        dt = self.decode_tokens
        if tail == n_dec and n_dec * dt <= budget:
            need = co.need()
            left = budget - n_dec * dt
            prefill, decode = plan.prefill, plan.decode
            for j in range(n_dec, len(running)):
                if left <= 0:
                    break
                r = running[j]
                n, blocks, is_decode = next_chunk(r, left, bs)
                need += blocks
                if is_decode:
                    decode.append(r)
                    n = min(dt, left)
                else:
                    prefill.append((r, n, r.computed))
                left -= n
            if need <= kv.free_blocks:
                if need:
                    kv.allocate(need)
                plan.cohort = n_dec
                plan.stop = self._admit(plan, left)
                return self._logged(plan)
            prefill.clear()
            decode.clear()
        # General path (vLLM's loop, with preemption): every request is handled one by one.
        if n_dec:
            co.dissolve(running)
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n, need, is_decode = next_chunk(r, budget, bs)
            if need > kv.free_blocks and not kv.can_allocate(need, 0, r.program):
                i, budget, stop = self._make_room(r, i, need, plan, budget)
                if stop:
                    break  # vLLM: "No more request to schedule"
            if need:
                kv.allocate(need)
            if is_decode:
                plan.decode.append(r)
                n = min(dt, budget)
            else:
                plan.prefill.append((r, n, r.computed))
            budget -= n
            i += 1
        if plan.preempted:
            plan.stop = "preempted"
            return self._logged(plan)
        plan.stop = self._admit(plan, budget)
        return self._logged(plan)

    def _make_room(self, r: Request, i: int, need: int, plan: StepPlan, budget: int) -> tuple[int, int, bool]:
        """Preempt until ``r`` = ``running[i]`` gets its ``need`` blocks (vLLM ``Scheduler.schedule``): victims from
        the not-yet-scheduled ``running[i:]`` (FCFS pops the tail), or with a ``whole_running`` victim policy
        (vLLM's priority mode) from the whole running list, one already scheduled in this step taken back out of it
        (:func:`unschedule`). Returns ``(r's index, budget, whether r itself was the victim)``."""
        kv, running = self.kv, self.running
        while True:
            if self._whole:
                victim = self.victim.pick(running, self.order, self.now)
                j = 0
                while running[j] is not victim:
                    j += 1
                if j < i:
                    budget += unschedule(plan.prefill, plan.decode, victim, self.decode_tokens)
                    i -= 1
            else:
                victim = self.victim.pick(running[i:], self.order, self.now)
            self.preempt(victim)
            plan.preempted.append(victim)
            if victim is r:
                return i, budget, True
            if need <= kv.free_blocks or kv.can_allocate(need, 0, r.program):
                return i, budget, False

    def _new_plan(self) -> StepPlan:
        """An empty plan: the one last handed back (:meth:`recycle`), else a new one."""
        plan = self._spare
        if plan is None:
            return StepPlan()
        self._spare = None
        return plan

    def recycle(self, plan: StepPlan) -> None:
        """The caller is done with ``plan`` (applied, priced, reported) and keeps no reference to it or its lists:
        they are emptied and the next :meth:`schedule` fills them again (a plan and five lists fewer to allocate and
        free every step). A plan never handed back is never reused."""
        if plan.prefill:  # (an empty list's clear() is still a call)
            plan.prefill.clear()
        if plan.decode:
            plan.decode.clear()
        if plan.preempted:
            plan.preempted.clear()
        if plan.admitted:
            plan.admitted.clear()
        if plan.loading:
            plan.loading.clear()
        plan.cohort = 0
        plan.stop = "empty"
        self._spare = plan

    def _logged(self, plan: StepPlan) -> StepPlan:
        """Stamp the admitted requests' first scheduling time and log the step's decisions."""
        now = self.now
        log = self.log
        if log is not None:
            for r in plan.preempted:
                entry = self._entry(now, "preempt", r)
                entry["victim_policy"] = self.victim.name
                log(entry)
        for r in plan.admitted:
            if r.first_sched_s < 0:
                r.first_sched_s = now
            if log is not None:
                entry = self._entry(now, "admit", r)
                entry["cached_tokens"] = r.cached_tokens
                entry["preemptions"] = r.preemptions
                entry["queue_policy"] = self.order.name
                log(entry)
        return plan

    def _entry(self, now: float, event: str, r: Request) -> dict[str, Any]:
        """A decision-log entry about ``r`` with the fields every event has; the caller adds the event's own."""
        return {"t": now, "event": event, "instance": self.index, "program": r.program, "turn": r.turn_idx}

    def _admit(self, plan: StepPlan, budget: int) -> StopReason:
        waiting, running = self.waiting, self.running
        if not waiting:
            return "empty"
        bs = self.bs
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
        inflight = sum(
            held_blocks(x.total_tokens, x.base, bs) - held_blocks(before + n, x.base, bs)
            for x, n, before in plan.prefill
        )
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
            # (held: its KV arrived from another tier, the blocks of the loaded part are held already)
            got = self._admit_loaded(r, budget) if r.held else self._admit_new(r, budget, inflight)
            if got is None:
                return "no_blocks"
            n, reserved = got
            inflight += reserved
            if n < 0:  # its KV loads first; it stays waiting
                plan.loading.append(r)
                i += 1
                continue
            del waiting[i]
            self._run_seq += 1
            r.run_seq = self._run_seq
            running.append(r)
            plan.admitted.append(r)
            plan.prefill.append((r, n, r.computed))
            budget -= n
        return "empty"

    def _admit_loaded(self, r: Request, budget: int) -> tuple[int, int] | None:
        """A waiting request whose KV arrived from a tier: allocate its first chunk's blocks (the loaded ones are
        held). ``(chunk tokens, blocks its prompt still needs after the chunk)``, or None without room."""
        kv, bs = self.kv, self.bs
        n = min(r.total_tokens - r.computed, budget)
        need = held_blocks(r.computed + n, r.base, bs) - held_blocks(r.computed, r.base, bs)
        rest = held_blocks(r.total_tokens, r.base, bs) - held_blocks(r.computed + n, r.base, bs)
        if not kv.can_allocate(need + (rest if self.reserve_full_isl else 0), 0, r.program):
            return None
        kv.allocate(need)
        r.held = False
        return n, rest

    def _admit_new(self, r: Request, budget: int, inflight: int) -> tuple[int, int] | None:
        """A waiting request: its cached prefix (``KVManager.get_computed_blocks``), the capacity check
        (``allocate_slots``: the whole sequence with ``reserve_full_isl``; an async load also keeps the in-flight
        prefills' ``inflight`` blocks free), then its slots. ``(chunk tokens, blocks its prompt still needs after
        the chunk)``; chunk -1 when a tier load started instead (vLLM allocates the external tokens' slots now and
        computes in a later step); None without room."""
        kv, bs = self.kv, self.bs
        total = r.total_tokens
        hit = kv.get_computed_blocks(r)
        pfx_hit, prog_hit, ext_blocks = hit.pfx_hit, hit.prog_hit, hit.ext_blocks
        hit_tokens = (pfx_hit + prog_hit) * bs
        if ext_blocks > 0:
            n = 0
            new_blocks = (r.base - pfx_hit) + ext_blocks
        else:
            n = min(total - hit_tokens, budget)
            new_blocks = (r.base - pfx_hit) + max(0, -(-(hit_tokens + n) // bs) - r.base - prog_hit)
        full = (r.base - pfx_hit) + max(0, -(-total // bs) - r.base - prog_hit)
        check = full if self.reserve_full_isl else new_blocks  # the whole sequence must fit now
        if ext_blocks > 0:  # an async load keeps the in-flight prefills' blocks free
            check = max(check, new_blocks + inflight)
        if not kv.can_allocate(check, hit.evictable, r.program):
            return None
        kv.allocate_slots(r, hit, new_blocks)
        r.computed = hit_tokens
        if not r.admitted:
            r.admitted = True
            r.cached_tokens = hit_tokens
            r.cached_prefix_tokens = pfx_hit * bs
        else:
            r.recomputed_tokens += total - hit_tokens - ext_blocks * bs
        if ext_blocks > 0:
            r.held = True
            kv.start_load(r, hit)
            return -1, full - new_blocks
        return n, full - new_blocks

    def unstall(self) -> bool:
        """The step planned nothing. True when memory was freed so that scheduling again may admit (wake now);
        False when the instance may idle: nothing waits, or an event will wake it (a KV load or a tier write
        completing, a pin expiring). Raises when waiting requests can never be admitted into an empty engine."""
        if self.running:  # a victim policy other than vLLM's preempted the very request it was scheduling
            return True  # (vLLM: "No more request to schedule") before any other: the rest run next step
        waiting = self.waiting
        if any(r.loading for r in waiting):
            return False  # a load completion wakes the instance
        res = self.kv.residency
        if res is not None and (res.writing or (not res.unpin_on_pressure and res.has_expiring_pins())):
            return False  # a write completion or a pin expiry frees blocks and wakes the instance
        if waiting and self.relieve():
            return True
        if waiting:
            raise RuntimeError(
                f"instance {self.index}: {len(waiting)} waiting requests cannot be admitted into an "
                f"empty engine ({self.pool.num_blocks} blocks)"
            )
        return False

    # ---- applying a step ---------------------------------------------------------------------------------------
    def allocate_decode_steps(self, first: int, count: int) -> None:
        """Allocate the blocks the cohort's decode steps ``first .. first + count - 1`` (0-based after the step
        the plan allocated) cross into: a fast-forwarded run's steps, allocated when they are applied or read."""
        self.kv.allocate(self.cohort.crossings(first, count))

    def update_from_output(self, plan: StepPlan, now: float, decode_steps: int = 0) -> list[Request]:
        """Apply a step that ended at ``now`` (vLLM ``Scheduler.update_from_output``): prompt chunks and decodes
        computed, a token emitted by every request whose computed tokens reach its stream, finished requests taken
        out of the running list and their KV through the retention policy. ``decode_steps`` > 0: the step was a
        fast-forwarded run of that many cohort decode steps (blocks allocated by :meth:`allocate_decode_steps`).
        Returns the finished requests in vLLM's order, its running list's (``update_from_output`` walks
        ``num_scheduled_tokens``; a prompt completing in a step may have been admitted after a decoder in it)."""
        finished: list[Request] = []
        co = self.cohort
        if decode_steps:
            finished.extend(co.advance(decode_steps))
        else:
            joining: list[Request] = []
            for r, n, _ in plan.prefill:
                r.computed += n
                if r.computed == r.total_tokens:
                    _emit(r, now, finished, joining)
            if plan.cohort:
                finished.extend(co.advance(1))  # the cohort precedes plan.decode in the running order
            for r in plan.decode:
                r.computed += 1
                _emit(r, now, finished, joining)
            if self.lazy_decode:
                for r in joining:
                    co.join(r)
        if len(finished) > 1:  # vLLM's order decides whose blocks the LRU queue evicts first
            finished.sort(key=lambda r: r.run_seq)
        for r in finished:
            _remove(self.running, r)
            self._retain(r, now)
            r.finish_s = now
        return finished

    def _retain(self, r: Request, now: float) -> None:
        """A finished call's KV through its tool gap (:meth:`KVManager.retain`), logged."""
        price = self.recompute_s
        done = self.kv.retain(r, now, lambda: price(max(1, r.computed)) if price is not None else 0.0)
        if done is not None and self.log is not None:
            d, action = done
            assert self.kv.retention is not None
            entry = self._entry(now, "retention", r)
            entry["policy"] = self.kv.retention.name
            entry["action"] = action
            entry["ttl_s"] = d.ttl_s
            entry["reason"] = d.reason
            entry["tool_class"] = r.tool_class
            self.log(entry)


def _remove(requests: list[Request], r: Request) -> None:
    """``requests.remove(r)`` comparing pointers: requests compare by identity (``eq=False``), no rich comparison."""
    for i in range(len(requests)):
        if requests[i] is r:
            del requests[i]
            return
    raise ValueError(f"request of program {r.program}, turn {r.turn_idx} is not in the list")


def _emit(r: Request, now: float, finished: list[Request], decoding: list[Request]) -> None:
    """``r`` emits a token: it finishes, or (still running) decodes from the next step on."""
    r.generated += 1
    if r.first_token_s < 0:
        r.first_token_s = now
    if r.generated >= r.target_out:
        finished.append(r)
    else:
        decoding.append(r)
