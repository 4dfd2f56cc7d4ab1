"""The discrete-event simulator: engine, orchestrator, tools, router, instances (scheduler + KV + perf)."""

from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import CapacityError, SimResult, simulate

__all__ = ["CapacityError", "SimConfig", "SimResult", "simulate"]
