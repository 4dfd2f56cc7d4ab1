"""Capacity planning: the cheapest configuration (GPU, TP, preset, instance count) that meets a service-level
objective at a sustained load, searched with the simulator on the sweep engine.

>>> from pathlib import Path
>>> from agentreplay.plan import PlanRequest, parse_slo, plan
>>> from agentreplay.sweep import make_executor
>>> req = PlanRequest(Path("datasets/swebench-verified"), 0.1, parse_slo("jct_p90<=600"), gpus=("h100-sxm", "b200"))
>>> with make_executor(workers=2) as ex:
...     result = plan(req, ex, "out/plan")
>>> result.chosen.family.label, result.chosen.instances, result.chosen.cost
"""

from agentreplay.plan.search import DEFAULT_SEEDS, Family, PlanError, PlanRequest, PlanResult, Trial, plan
from agentreplay.plan.slo import SloError, Term, parse_slo

__all__ = [
    "DEFAULT_SEEDS",
    "Family",
    "PlanError",
    "PlanRequest",
    "PlanResult",
    "SloError",
    "Term",
    "Trial",
    "parse_slo",
    "plan",
]
