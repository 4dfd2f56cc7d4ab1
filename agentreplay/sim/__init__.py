"""The discrete-event simulator: engine, orchestrator, tools, router, instances (scheduler + KV + perf).

The public names are loaded lazily so that low-level modules (``agentreplay.kv.tiers`` uses the engine) can
import ``agentreplay.engine`` without pulling in the whole simulator.
"""

from typing import Any

__all__ = ["CapacityError", "SimConfig", "SimResult", "simulate"]


def __getattr__(name: str) -> Any:
    if name == "SimConfig":
        from agentreplay.sim.config import SimConfig

        return SimConfig
    if name in ("CapacityError", "SimResult", "simulate"):
        from agentreplay.sim import run

        return getattr(run, name)
    raise AttributeError(name)
