"""Preemption victims (a policy axis, :mod:`agentreplay.policy.registry`): which running request a recompute
preemption evicts when blocks run out. Registered in :data:`VICTIMS` (``[policy] victim``, CLI ``--victim``);
a policy is built as ``cls(params)``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentreplay.policy.registry import Entry, NoParams, Registry
from agentreplay.request import Request
from agentreplay.scheduler.queue import QueueOrder


class VictimPolicy(Protocol):
    """``pick`` gets the running requests not yet scheduled in the step (vLLM FCFS pops the tail); a policy with a
    true class attribute ``whole_running`` gets the whole running list, and a victim already scheduled in the step
    is taken back out of it (vLLM's priority mode, :mod:`agentreplay.scheduler.plan`)."""

    name: str

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request: ...


class MostRecent:
    """vLLM v1 FCFS: the most recently admitted running request (``self.running.pop()``)."""

    name = "most-recent"

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request:
        return running[-1]


class LowestPriority:
    """vLLM v1 priority scheduling: the running request with the worst (priority, arrival), the first two fields of
    the queue key, the first such in running order (``max(self.running, key=lambda r: (r.priority,
    r.arrival_time))``). Picked from the whole running list (``whole_running``): vLLM takes a victim already
    scheduled in the step back out of it (:mod:`agentreplay.scheduler.unschedule`)."""

    name = "lowest-priority"
    whole_running = True

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request:
        best_i = 0
        best = order.key(running[0], now)[:2]
        for i in range(1, len(running)):
            k = order.key(running[i], now)[:2]
            if k > best:
                best_i, best = i, k
        return running[best_i]


class AgeAware:
    """Protect programs with the most accumulated context: evict the running call with the shortest context
    (least work lost, and long-lived agents are not thrashed; the age-blind failure mode of DESIGN §1).
    Ties go to the most recent admission."""

    name = "age-aware"

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request:
        best_i = len(running) - 1
        for i in range(len(running) - 2, -1, -1):
            if running[i].total_tokens < running[best_i].total_tokens:
                best_i = i
        return running[best_i]


class YoungestFirst:
    """Age-aware preemption for failover and memory pressure: evict the running call of the *youngest* program
    (fewest turns done, then least attained service: prompt + output tokens of its finished calls), so that old
    programs, whose contexts are the longest and costliest to rebuild, keep their KV. Ties go to the most recent
    admission.

    Autellix (§4.1, PLAS; the ``plas`` queue order here) schedules by *least attained service*: programs that
    have received the least service run first, and its multi-level feedback queue demotes a program as its
    service grows, so under contention the most-served programs wait, and lose their KV, first. That favours
    young programs to cut mean JCT. This policy does the opposite for the victim: it protects the most-served
    programs, because on a recompute preemption (and after a failover) their lost KV is the most work to redo.
    ``age-aware`` looks at the call's context length only; this one at the program's age."""

    name = "youngest-first"

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request:
        best_i = len(running) - 1
        b = running[best_i]
        best = (b.turn_idx, b.info.service_tokens)
        for i in range(len(running) - 2, -1, -1):
            r = running[i]
            k = (r.turn_idx, r.info.service_tokens)
            if k < best:
                best_i, best = i, k
        return running[best_i]


VICTIMS: Registry[VictimPolicy] = Registry(
    "victim",
    [
        Entry("most-recent", MostRecent, NoParams, "the latest admitted running call (vLLM)"),
        Entry("lowest-priority", LowestPriority, NoParams, "the running call with the worst queue key (vLLM priority)"),
        Entry("age-aware", AgeAware, NoParams, "the running call with the shortest context"),
        Entry("youngest-first", YoungestFirst, NoParams, "the running call of the program with the fewest turns done"),
    ],
)
