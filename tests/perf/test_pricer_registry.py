"""The pricer registry (agentreplay.perf.registry): the config's pricer names are the registry's, every registered
kind builds a pricer, and the agentreplay.perf.table facade hands out the parts' own objects."""

from __future__ import annotations

from typing import get_args

from agentreplay.perf import IterationPricer
from agentreplay.perf import table as facade
from agentreplay.perf.registry import BUILDERS, PRICER_KINDS, pricer_from_names
from agentreplay.sim.config import PerfName


def test_config_names_are_the_registry() -> None:
    assert set(get_args(PerfName)) == set(PRICER_KINDS) == set(BUILDERS)


def test_every_registered_kind_builds_a_pricer() -> None:
    for kind in PRICER_KINDS:
        pm = pricer_from_names(kind, "h100-sxm", "llama-3.1-8b", tp=2)
        assert isinstance(pm, IterationPricer), kind
        assert pm.iteration_time_s([(128, 0)], [100, 200]) > pm.iteration_time_s([(64, 0)], [100, 200]) > 0, kind


def test_facade_reexports_the_parts() -> None:
    import agentreplay.perf.loaders as loaders
    import agentreplay.perf.measured as measured
    import agentreplay.perf.refined as refined
    import agentreplay.perf.refinement as refinement
    import agentreplay.perf.registry as registry
    import agentreplay.perf.table_model as table_model

    parts = (loaders, measured, refined, refinement, registry, table_model)
    for name in facade.__all__:
        owners = [m for m in parts if getattr(m, name, None) is getattr(facade, name)]
        assert owners, name
