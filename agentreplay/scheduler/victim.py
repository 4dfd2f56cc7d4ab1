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
    """vLLM v1 priority scheduling: the running request with the worst queue key (``max(self.running,
    key=lambda r: (r.priority, r.arrival_time))``); ties go to the most recent admission."""

    name = "lowest-priority"

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request:
        best_i = len(running) - 1
        best = order.key(running[best_i], now)
        for i in range(len(running) - 2, -1, -1):
            k = order.key(running[i], now)
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


VICTIMS: Registry[VictimPolicy] = Registry(
    "victim",
    [
        Entry("most-recent", MostRecent, NoParams, "the latest admitted running call (vLLM)"),
        Entry("lowest-priority", LowestPriority, NoParams, "the running call with the worst queue key (vLLM priority)"),
        Entry("age-aware", AgeAware, NoParams, "the running call with the shortest context"),
    ],
)
