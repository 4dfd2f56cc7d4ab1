"""The Mechanism seam (agentreplay.features.mechanism): a default run attaches nothing that runs per call, the
mechanisms that are on plug in through hooks and declared dependencies, wirings and hooks combine in registry
order, and the summary lists the mechanisms' sections where it always did."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agentreplay.features.mechanism import Hooks, Mechanism, Wiring, combine, dependencies, enabled
from agentreplay.features.registry import NAMES, features
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.build import attach, build
from agentreplay.sim.run import resolve
from agentreplay.sim.workload import compile_trace
from tests.factories import make_trace
from tests.features.disagg.test_disagg import cfg as disagg_cfg
from tests.sim.fakes import LinearPerf

PROGRAMS = [[(1000, 10, 1.0), (1100, 10, None)], [(500, 5, None)]]


def _kernel(cfg: SimConfig, perf: Any = None) -> tuple[Any, Hooks, list[tuple[str, Mechanism]]]:
    """The kernel of a run of :data:`PROGRAMS` under ``cfg``, its mechanisms attached (as ``simulate`` does)."""
    mechanisms = enabled(cfg)
    trace = make_trace(PROGRAMS)
    res, _ = resolve(trace, compile_trace(trace), cfg, mechanisms, perf)
    cluster, _ = build(cfg, res, mechanisms)
    return cluster, attach(cluster, mechanisms), mechanisms


def test_a_default_run_installs_no_hook() -> None:
    """Only the admission gate's mechanism is built (admit-all: the orchestrator never calls it per turn), and
    every hook tuple the compiled orchestrator iterates is empty."""
    cluster, hooks, mechanisms = _kernel(SimConfig().replace(cache={"num_gpu_blocks": 400}), LinearPerf())
    assert [name for name, _ in mechanisms] == ["classes"]
    assert hooks == Hooks()
    orch = cluster.orch
    assert orch._on_route == orch._place == orch._on_turn_done == ()
    assert not orch._gated
    assert cluster.steps is cluster.workload and cluster.decode_tokens == 1
    assert all(inst.lockstep is None for inst in cluster.instances)


def test_every_factory_is_off_in_a_default_config() -> None:
    from agentreplay.features.base import load

    on = {f.name for f in features() if f.mechanism is not None and load(f.mechanism)(SimConfig()) is not None}
    assert on == {"classes"}


def test_failover_receives_disaggregation_and_the_stream_sink_it_declares(tmp_path) -> None:
    """Failover needs ``disagg`` and ``dp``: it gets the hand-off that is on (not the lockstep group, off here) and
    the streamed run's sink as constructor arguments, and its hooks run after disaggregation's."""
    cfg = disagg_cfg().replace(failures={"events": [{"instance": 1, "at_s": 5.0, "recover_after_s": 1.0}]})
    mechanisms = enabled(cfg)
    assert [name for name, _ in mechanisms] == ["classes", "disagg", "failover"]
    trace = make_trace(PROGRAMS)
    res, _ = resolve(trace, compile_trace(trace), cfg, mechanisms, LinearPerf())
    cluster, _ = build(cfg, res, mechanisms, stream_to=tmp_path)
    hooks = attach(cluster, mechanisms)
    by_name = dict(mechanisms)
    fo, disagg = by_name["failover"].failover, by_name["disagg"].disagg  # type: ignore[attr-defined]
    assert fo.disagg is disagg and fo.group is None and fo.sink is cluster.sink is not None
    assert fo.routed == 1  # (the prefill pool)
    assert hooks.on_route == (disagg.prepare,) and hooks.place == (fo.place,)
    assert hooks.on_turn_done == (fo.on_turn_done,) and hooks.before_run == (fo.start,)
    assert cluster.orch._place == (fo.place,) and cluster.orch._on_route == (disagg.prepare,)
    assert disagg._side_done == (fo.on_side_done,)
    cluster.sink.abort()


def test_failover_receives_the_lockstep_group_of_a_moe_deployment() -> None:
    cfg = SimConfig().replace(
        hardware={"model": "qwen3-30b-a3b", "dp": 2, "ep": True},
        cache={"num_gpu_blocks": 4000},
        router={"policy": "vllm-dp"},
        failures={"events": [{"instance": 0, "at_s": 1.0, "recover_after_s": 1.0}]},
    )
    cluster, _, mechanisms = _kernel(cfg)
    by_name = dict(mechanisms)
    group = by_name["dp"].group  # type: ignore[attr-defined]
    assert by_name["failover"].failover.group is group  # type: ignore[attr-defined]
    assert all(inst.lockstep is group for inst in cluster.instances)


class _Needs(Mechanism):
    needs = ("failover",)

    def attach(self, cluster: Any, deps: Mapping[str, Mechanism]) -> Hooks:
        return Hooks()


def test_a_need_must_be_an_earlier_feature() -> None:
    """A mechanism attaches after what it needs (registry order): itself, a later feature or an unknown one fails."""
    with pytest.raises(ValueError, match=r"'failover' needs \['failover'\]"):
        dependencies("failover", _Needs(), {})
    with pytest.raises(ValueError, match=r"'disagg' needs \['failover'\]: not features registered before it"):
        dependencies("disagg", _Needs(), {})
    with pytest.raises(ValueError, match="'nosuch' is not a registered feature"):
        dependencies("nosuch", _Needs(), {})
    unknown = _Needs()
    unknown.needs = ("nosuch",)  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"'fanout' needs \['nosuch'\]"):
        dependencies("fanout", unknown, {})


def test_dependencies_are_the_needed_mechanisms_that_are_on() -> None:
    a, b = _Needs(), _Needs()
    assert dependencies("fanout", b, {"failover": a, "dp": b}) == {"failover": a}
    assert dependencies("fanout", b, {"dp": b}) == {}
    assert list(NAMES).index("fanout") > list(NAMES).index("failover")


def test_wirings_combine_links_and_refuse_two_setters() -> None:
    w = combine([Wiring(links=("a",), decode_tokens=4), Wiring(links=("b",), spreads_history=True)], ["x", "y"])  # type: ignore[arg-type]
    assert w.links == ("a", "b") and w.decode_tokens == 4 and w.spreads_history and w.router is None
    with pytest.raises(ValueError, match="mechanisms 'x' and 'y' both set the kernel's router"):
        combine([Wiring(router="a"), Wiring(router="b")], ["x", "y"])


def test_hooks_concatenate_in_order() -> None:
    def f(r: Any) -> None: ...

    def g(r: Any) -> None: ...

    h = Hooks(on_route=(f,), after_run=(print,)) + Hooks(on_route=(g,), on_turn_done=(g,))
    assert h == Hooks(on_route=(f, g), on_turn_done=(g,), after_run=(print,))


def test_the_summary_lists_the_mechanisms_sections_where_it_always_did() -> None:
    """Every mechanism on: the admission sections follow ``rejected``, the others the cluster's figures, in their
    fixed order; the notes every run gets come last."""
    cfg = disagg_cfg().replace(
        admission={"policy": "deadline"},
        classes={"enabled": True},
        thinking={"budget_tokens": 5},
        speculative={"method": "ngram"},
        footprint={"interval_s": 0.5},
        failures={"events": [{"instance": 0, "at_s": 0.05, "recover_after_s": 0.5}]},
    )
    keys = list(simulate(make_trace(PROGRAMS), cfg, perf=LinearPerf(a=0.01, b=0.001)).summary)
    tail = keys[keys.index("engine") + 1 :]
    assert tail == ["disagg", "thinking", "speculative", "footprint", "failover", "findings", "error_bands"]
    assert keys[keys.index("rejected") + 1 : keys.index("rejected") + 3] == ["admission", "classes"]
    assert keys.index("classes") < keys.index("affinity_breaks") < keys.index("cluster")


def test_a_mechanism_off_leaves_its_sections_out() -> None:
    s = simulate(make_trace(PROGRAMS), SimConfig().replace(cache={"num_gpu_blocks": 400}), perf=LinearPerf()).summary
    absent = {"admission", "classes", "disagg", "thinking", "speculative", "footprint", "failover", "dp_group"}
    assert not absent & set(s)
    assert list(s)[-2:] == ["findings", "error_bands"]
