"""Admission (a policy axis, :mod:`agentreplay.policy.registry`): whether a released call enters the cluster now
or waits at the front end. Registered in :data:`ADMISSIONS`; built as ``cls(params)``.

The orchestrator asks :meth:`AdmissionPolicy.admit` for every released call (a program's first call at its
arrival, each later call when its tool gap ends) before routing it. A deferred call waits in the orchestrator's
front-end queue, in release order, and is offered again each time a call finishes anywhere in the cluster (the
moment capacity can have freed) and at the time :meth:`AdmissionPolicy.next_wake` asks for (a periodic check, a
forced resume); :meth:`AdmissionPolicy.finished` tells the policy each time a call of a program ends. The default
admits everything, which is what every serving engine the simulator models does (vLLM's front end queues
nothing: ``vllm/v1/engine/async_llm.py`` ``AsyncLLM.add_request`` hands every request to the engine core), and
the orchestrator then asks it nothing. ``thunderagent`` (:mod:`.thunderagent`) pauses programs whose KV footprint
would not fit, as ThunderAgent's released router does (:mod:`.thunderagent_released`) or, with ``[admission]
thunder_variant = "original"``, as its earlier version did (:func:`build_thunderagent`); ``deadline``
(:mod:`.deadline`) defers or rejects programs that cannot meet their deadline.
Configuration ``[admission] policy`` (CLI ``--admission``); built as ``cls(params, ctx)``, ``ctx`` the
per-program deadlines (:class:`.deadline.DeadlineContext`) or None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentreplay.policy.registry import Entry, NoParams, Registry
from agentreplay.request import Request
from agentreplay.router.deadline import DeadlineAdmission, DeadlineParams
from agentreplay.router.policies import InstanceView
from agentreplay.router.thunderagent import ThunderAgent, ThunderParams
from agentreplay.router.thunderagent_released import ThunderAgentReleased


class AdmissionPolicy(Protocol):
    name: str

    def admit(self, r: Request, instances: Sequence[InstanceView], now: float) -> bool:
        """True: route ``r`` now; False: hold it at the front end and ask again when a call finishes."""
        ...

    def finished(self, r: Request, now: float) -> None:
        """A call ``r`` ended (before the held calls are offered again)."""
        ...

    def next_wake(self, now: float) -> float:
        """While calls are held: the time to offer them again even if no call ends (inf: none)."""
        ...


class AdmitAll:
    """Every call enters the cluster when it is released (vLLM, SGLang: no front-end admission control)."""

    name = "admit-all"

    def __init__(self, params: NoParams | None = None, ctx: object = None) -> None:
        pass

    def admit(self, r: Request, instances: Sequence[InstanceView], now: float) -> bool:
        return True

    def finished(self, r: Request, now: float) -> None:
        pass

    def next_wake(self, now: float) -> float:
        return float("inf")


def build_thunderagent(params: ThunderParams, ctx: object = None) -> AdmissionPolicy:
    """The ``thunderagent`` policy of ``params.thunder_variant``: the released router (default) or the original."""
    if params.thunder_variant == "original":
        return ThunderAgent(params, ctx)
    return ThunderAgentReleased(params, ctx)


ADMISSIONS: Registry[AdmissionPolicy] = Registry(
    "admission",
    [
        Entry("admit-all", AdmitAll, NoParams, "every released call enters the cluster at once (vLLM, SGLang)"),
        Entry(
            "thunderagent",
            build_thunderagent,
            ThunderParams,
            "pause programs whose KV footprint would not fit, resume greedily (ThunderAgent)",
        ),
        Entry(
            "deadline", DeadlineAdmission, DeadlineParams, "defer or reject programs that cannot meet their deadline"
        ),
    ],
)
