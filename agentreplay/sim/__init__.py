"""The simulator's assembly: configuration, the orchestrator and tool simulator, instances (a scheduler with its
KV manager, priced by the performance model), metrics, and :func:`simulate` (``agentreplay.sim.run``).

The public names are loaded lazily so that importing a submodule (``agentreplay.sim.config``, as the CLI does to
build its options) does not pay for ``run``'s imports (pandas, pyarrow, the pricers): a start-up cost, not an
import cycle (``tests/test_import_graph.py``).
"""

from typing import Any

__all__ = ["CapacityError", "SimConfig", "SimResult", "simulate"]


def __getattr__(name: str) -> Any:
    if name == "SimConfig":
        from agentreplay.sim.config import SimConfig

        return SimConfig
    if name == "SimResult":
        from agentreplay.sim.result import SimResult

        return SimResult
    if name in ("CapacityError", "simulate"):
        from agentreplay.sim import run

        return getattr(run, name)
    raise AttributeError(name)
