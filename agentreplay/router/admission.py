"""Admission (a policy axis, :mod:`agentreplay.policy.registry`): whether a released call enters the cluster now
or waits at the front end. Registered in :data:`ADMISSIONS`; built as ``cls(params)``.

The orchestrator asks :meth:`AdmissionPolicy.admit` for every released call (a program's first call at its
arrival, each later call when its tool gap ends) before routing it. A deferred call waits in the orchestrator's
front-end queue, in release order, and is offered again each time a call finishes anywhere in the cluster (the
moment capacity can have freed); program-aware admission (ThunderAgent-style pausing of programs whose KV
footprint would not fit) plugs in here. The only policy today admits everything, which is what every serving
engine the simulator models does (vLLM's front end queues nothing: ``vllm/v1/engine/async_llm.py``
``AsyncLLM.add_request`` hands every request to the engine core).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentreplay.policy.registry import Entry, NoParams, Registry
from agentreplay.request import Request
from agentreplay.router.policies import InstanceView


class AdmissionPolicy(Protocol):
    name: str

    def admit(self, r: Request, instances: Sequence[InstanceView], now: float) -> bool:
        """True: route ``r`` now; False: hold it at the front end and ask again when a call finishes."""
        ...


class AdmitAll:
    """Every call enters the cluster when it is released (vLLM, SGLang: no front-end admission control)."""

    name = "admit-all"

    def __init__(self, params: NoParams | None = None) -> None:
        pass

    def admit(self, r: Request, instances: Sequence[InstanceView], now: float) -> bool:
        return True


ADMISSIONS: Registry[AdmissionPolicy] = Registry(
    "admission",
    [
        Entry("admit-all", AdmitAll, NoParams, "every released call enters the cluster at once (vLLM, SGLang)"),
    ],
)
