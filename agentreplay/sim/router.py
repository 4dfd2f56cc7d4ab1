"""Routers: which instance a released turn goes to. One small class per policy, a name-keyed registry.

The simulator's agent-aware routers (session affinity, SGLang cache-aware, Autellix) build on this interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentreplay.sim.instance import Instance
from agentreplay.sim.request import Request


class Router(Protocol):
    name: str

    def pick(self, r: Request, instances: Sequence[Instance]) -> int: ...


class RoundRobin:
    """Instances in turn, whatever their load (vLLM production-stack / Kubernetes service default)."""

    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def pick(self, r: Request, instances: Sequence[Instance]) -> int:
        i = self._next % len(instances)
        self._next += 1
        return i


class LeastLoaded:
    """Fewest outstanding requests (queued + running); ties to the lowest index (deterministic)."""

    name = "least-loaded"

    def pick(self, r: Request, instances: Sequence[Instance]) -> int:
        best, best_load = 0, None
        for i, inst in enumerate(instances):
            load = inst.outstanding
            if best_load is None or load < best_load:
                best, best_load = i, load
        return best


ROUTERS = {"round-robin": RoundRobin, "least-loaded": LeastLoaded}


def make_router(name: str) -> Router:
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"unknown router {name!r}; known: {sorted(ROUTERS)}") from None
