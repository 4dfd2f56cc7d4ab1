"""Task-level deadline admission (an admission policy, :data:`agentreplay.router.admission.ADMISSIONS`).

Each program has a JCT deadline ``D`` (its priority class's, :mod:`agentreplay.features.classes.config`: absolute,
or a multiple of its uncontended JCT as :mod:`agentreplay.fleet.goodput` defines it). When one of its calls is
released at ``now``, the program can still meet the deadline only if

    now + remaining_s(turn) <= arrival + D

with ``remaining_s(turn)`` the uncontended time of this call and everything after it: each remaining call alone
on an instance with its history cached, plus the trace's tool gaps between them (the estimate of
:mod:`agentreplay.fleet.uncontended`, priced by the run's own model before the run). Two actions
(``deadline_action``), the two forms of SLO-aware admission control in the serving literature (admit, defer or
reject by estimated completion time):

- ``reject``: a program that cannot meet its deadline even uncontended is refused at arrival: none of it runs, and
  it counts as a miss (goodput's "attempted" includes it). At arrival ``now = arrival``, so the test reads
  ``remaining_s(0) > D``: it depends on nothing the run changes, and is applied to the workload before the run
  (exact: a refused program costs the cluster nothing), like ``max_model_len`` rejections
  (:mod:`agentreplay.sim.admission`). Its calls are never offered to :meth:`DeadlineAdmission.admit`.
- ``defer``: a call of a program that can no longer meet its deadline is held at the front end while any
  instance has calls waiting (work that can still make its deadline goes first), and offered again whenever a
  call ends; it enters when no instance has a waiting call. The program still finishes (late).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from agentreplay.policy.registry import check
from agentreplay.request import Request
from agentreplay.router.policies import InstanceView

if TYPE_CHECKING:  # numpy is imported where an array is made: listing the admission policies (--help) needs none
    import numpy as np

DeadlineAction = Literal["defer", "reject"]
#: Seconds of slack in the feasibility test (float sums of many turn prices).
EPS_S = 1e-9


@dataclass(frozen=True, slots=True)
class DeadlineParams:
    deadline_action: DeadlineAction = "defer"  #: refuse infeasible programs at arrival, or defer calls

    def __post_init__(self) -> None:
        check(self.deadline_action in ("defer", "reject"), "deadline_action", self.deadline_action, "defer or reject")


def _no_priority() -> np.ndarray:
    """No class rank: an empty int64 array."""
    import numpy as np

    return np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class DeadlineContext:
    """Per-program deadlines and per-turn remaining uncontended time (built before the run)."""

    deadline_s: np.ndarray  #: float64 [n_programs]: JCT deadline, seconds after the program's arrival
    remaining_s: np.ndarray  #: float64 [n_turns]: uncontended seconds from this turn's release to the program's end
    priority: np.ndarray = field(default_factory=_no_priority)  #: class rank per program


class DeadlineAdmission:
    """Defer calls of programs that can no longer meet their deadline (module docstring); ``reject`` acts before
    the run (:func:`agentreplay.features.classes.classes.reject_infeasible`)."""

    name = "deadline"

    def __init__(self, params: DeadlineParams, ctx: DeadlineContext | None = None) -> None:
        self.action = params.deadline_action
        self.ctx = ctx
        self.infeasible_calls = 0  #: calls released after their program's deadline became unreachable
        self.deferred_calls = 0  #: ... of which held at least once
        self.late_programs: set[int] = set()
        self.held_since: dict[int, float] = {}  #: turn -> when it was first held
        self.held_s = 0.0
        self.rejected_programs = 0  #: set by the run (reject acts before it)

    def feasible(self, r: Request, now: float) -> bool:
        ctx = self.ctx
        if ctx is None:
            return True
        return now + float(ctx.remaining_s[r.turn]) <= r.info.arrival_s + float(ctx.deadline_s[r.program]) + EPS_S

    def admit(self, r: Request, instances: Sequence[InstanceView], now: float) -> bool:
        first = r.turn not in self.held_since
        if self.action == "reject" or self.feasible(r, now):
            return True
        if first:
            self.infeasible_calls += 1
            self.late_programs.add(r.program)
        if any(inst.queue_lengths()[0] > 0 for inst in instances):
            if first:
                self.deferred_calls += 1
                self.held_since[r.turn] = now
            return False
        since = self.held_since.pop(r.turn, None)
        if since is not None:
            self.held_s += now - since
        return True

    def finished(self, r: Request, now: float) -> None:
        pass

    def next_wake(self, now: float) -> float:
        return float("inf")  # held calls are offered again when a call ends (the only moment a queue drains)

    def summary(self) -> dict[str, object]:
        return {
            "policy": self.name,
            "action": self.action,
            "rejected_programs": self.rejected_programs,
            "infeasible_calls": self.infeasible_calls,
            "deferred_calls": self.deferred_calls,
            "late_programs": len(self.late_programs),
            "held_s_total": self.held_s,
        }
