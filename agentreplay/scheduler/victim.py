"""Preemption victim selection: which running request a recompute preemption evicts when blocks run out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentreplay.request import Request
from agentreplay.scheduler.queue import QueueOrder
from agentreplay.sim.config import PolicyConfig


class VictimPolicy(Protocol):
    name: str

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request: ...


class MostRecent:
    """vLLM v1 FCFS: the most recently admitted running request (``self.running.pop()``)."""

    name = "most-recent"

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request:
        return running[-1]


class LowestPriority:
    """vLLM v1 priority scheduling: the running request with the worst queue key (``max(self.running,
    key=lambda r: (r.priority, r.arrival_time))``); ties go to the most recent admission."""

    name = "lowest-priority"

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

    def pick(self, running: Sequence[Request], order: QueueOrder, now: float) -> Request:
        best_i = len(running) - 1
        for i in range(len(running) - 2, -1, -1):
            if running[i].total_tokens < running[best_i].total_tokens:
                best_i = i
        return running[best_i]


VICTIMS: dict[str, type[MostRecent] | type[LowestPriority] | type[AgeAware]] = {
    "most-recent": MostRecent, "lowest-priority": LowestPriority, "age-aware": AgeAware}


def make_victim(cfg: PolicyConfig) -> VictimPolicy:
    return VICTIMS[cfg.victim]()
