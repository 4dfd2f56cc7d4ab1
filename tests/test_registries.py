"""The policy axes: every registered policy of every axis runs, and the configuration, the registries and the CLI
help name the same policies with the same parameters (agentreplay.policy.registry); the docs' generated policy
reference lists them all (tests/test_docs.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
import typer.main

from agentreplay.cli import app
from agentreplay.features.classes.config import AdmissionConfig
from agentreplay.kv.retention import RETENTIONS, ToolStats
from agentreplay.policy.presets import PRESETS
from agentreplay.policy.registry import NoParams, ParamError, Registry, close_names, did_you_mean
from agentreplay.router.admission import ADMISSIONS, AdmitAll
from agentreplay.router.policies import ROUTERS
from agentreplay.scheduler.queue import QUEUE_ORDERS
from agentreplay.scheduler.victim import VICTIMS
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError, PolicyConfig, RouterConfig
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf

#: axis -> (registry, configuration section holding its name and parameters, the field naming the policy, option)
AXES: dict[str, tuple[Registry[Any], str, str, str]] = {
    "router": (ROUTERS, "router", "policy", "--router"),
    "queue": (QUEUE_ORDERS, "policy", "queue", "--queue"),
    "victim": (VICTIMS, "policy", "victim", "--victim"),
    "retention": (RETENTIONS, "policy", "retention", "--retention"),
    "admission": (ADMISSIONS, "admission", "policy", "--admission"),
}
SECTIONS = {"router": RouterConfig, "policy": PolicyConfig, "admission": AdmissionConfig}
AGENTS = [[(2000, 20, 0.5), (2100, 20, 0.3), (2200, 20, None)]] * 6
ALL = [(axis, name) for axis, (reg, *_) in AXES.items() for name in reg.names()]


@pytest.mark.parametrize(("axis", "name"), ALL, ids=[f"{a}:{n}" for a, n in ALL])
def test_every_registered_policy_runs(axis: str, name: str) -> None:
    _, section, field, _ = AXES[axis]
    cfg = SimConfig().replace(
        hardware={"instances": 2},
        cache={"num_gpu_blocks": 400},
        workload={"concurrency": 4},
        tiers={"dram_gib": 1.0},
        **{section: {field: name}},
    )
    res = simulate(make_trace(AGENTS), cfg, perf=LinearPerf())
    assert len(res.turns) == sum(len(a) for a in AGENTS)
    if axis == "admission":  # (the summary names a policy other than admit-all in its own section)
        assert res.summary.get("admission", {}).get("policy", "admit-all") == name
    else:
        assert res.summary["policy"]["router" if axis == "router" else axis] == name


def test_every_policy_names_itself_and_builds_from_the_default_configuration() -> None:
    defaults = SimConfig()
    for axis, (reg, section, _, _) in AXES.items():
        for e in reg.entries():
            deps = (ToolStats(),) if axis == "retention" else ()
            policy = reg.build(e.name, getattr(defaults, section), *deps)
            assert policy.name == e.name, (axis, e.name)
            assert e.summary and "[" not in e.summary  # help text (rich markup)
    assert ADMISSIONS.names()[0] == "admit-all"
    assert isinstance(ADMISSIONS.build("admit-all", None), AdmitAll)


def test_parameters_are_configuration_fields_with_the_same_defaults() -> None:
    """Each policy's parameter dataclass reads fields of its section: every one exists there, typed and defaulted
    alike; and every field of the section is a policy name, a parameter, or a declared mechanism setting."""
    mechanism = {"policy": {"unpin_on_pressure", "decision_log"}, "router": set(), "admission": set()}
    for axis, (reg, section, field, _) in AXES.items():
        cls = SECTIONS[section]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name, f in reg.param_fields().items():
            assert name in fields, f"{axis} parameter {name} is not a field of [{section}] ({cls.__name__})"
            assert fields[name].default == f.default, f"[{section}] {name}: default differs from {axis}'s"
            if isinstance(f.type, str):  # (a mypyc-compiled dataclass keeps no annotation text)
                assert fields[name].type == f.type, f"[{section}] {name}: type differs from {axis}'s"
        assert field in fields
        for e in reg.entries():
            assert dataclasses.is_dataclass(e.params) and e.params.__dataclass_params__.frozen, e.name  # type: ignore[attr-defined]
    for section, cls in SECTIONS.items():
        used = {AXES[a][2] for a in AXES if AXES[a][1] == section} | mechanism[section]
        used |= {n for a in AXES if AXES[a][1] == section for n in AXES[a][0].param_fields()}
        assert {f.name for f in dataclasses.fields(cls)} == used, section


def test_configuration_names_and_values_are_checked_by_the_registries() -> None:
    for reg, section, field, _ in AXES.values():
        with pytest.raises(ConfigError, match=f"\\[{section}\\] {field} = 'nope' is invalid: one of"):
            SimConfig().replace(**{section: {field: "nope"}})
        for name in reg.names():
            SimConfig().replace(**{section: {field: name}})
    with pytest.raises(ConfigError, match=r"\[policy\] ttl_s = -1.0 is invalid: >= 0"):
        PolicyConfig(ttl_s=-1.0)
    with pytest.raises(ConfigError, match=r"\[router\] cache_threshold = 2.0 is invalid"):
        RouterConfig(cache_threshold=2.0)
    with pytest.raises(ParamError):
        QUEUE_ORDERS.params("plas", _Fields(plas_quanta_tokens=(5, 1), plas_starvation_s=1.0))
    with pytest.raises(ValueError, match="unknown queue policy 'x'; known: fcfs, "):
        QUEUE_ORDERS.entry("x")
    with pytest.raises(ValueError, match=r"unknown queue policy 'fcsf' \(did you mean 'fcfs'\?\); known: fcfs, "):
        QUEUE_ORDERS.entry("fcsf")


def test_close_names_prefer_the_names_a_typo_begins() -> None:
    gpus = ["a100-40gb", "a100-80gb", "h100-sxm", "h200"]
    assert close_names("h100", gpus) == ["h100-sxm"]  # not h200, closer by edit distance
    assert close_names("A100", gpus) == ["a100-40gb", "a100-80gb"]
    assert close_names("h20", ["h200", "h100-sxm"]) == ["h200"]
    assert close_names("gpuu", ["gpu", "tp", "dtype"]) == ["gpu"]
    assert close_names("zzz", gpus) == [] and close_names(3, gpus) == [] and close_names("", gpus) == []
    assert did_you_mean("vlm", ["vllm", "sglang"]) == " (did you mean 'vllm'?)"
    assert did_you_mean("a100", gpus) == " (did you mean 'a100-40gb' or 'a100-80gb'?)"
    assert did_you_mean("zzz", gpus) == ""


class _Fields:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def _help(option: str) -> str:
    cmd = typer.main.get_command(app).commands["simulate"]  # type: ignore[attr-defined]
    return next(p.help for p in cmd.params if option in p.opts)


def test_cli_help_lists_every_registered_policy() -> None:
    for _axis, (reg, _, _, option) in AXES.items():
        text = _help(option)
        for e in reg.entries():
            assert f"{e.name} ({e.summary})" in text, (option, e.name)
    for preset in PRESETS.values():
        assert preset["router"]["policy"] in ROUTERS
        for axis, reg in (("queue", QUEUE_ORDERS), ("victim", VICTIMS), ("retention", RETENTIONS)):
            assert preset["policy"][axis] in reg


class _HoldUntilLater:
    """A test admission policy: program 0's calls enter at once, every other call only after t = 0 (so the calls
    released at t = 0 wait at the front end until a call finishes and they are offered again)."""

    name = "hold"

    def __init__(self) -> None:
        self.asked: list[tuple[int, float]] = []

    def admit(self, r: Any, instances: Sequence[Any], now: float) -> bool:
        self.asked.append((r.program, now))
        return r.program == 0 or now > 0

    def finished(self, r: Any, now: float) -> None:
        pass

    def next_wake(self, now: float) -> float:
        return float("inf")


class _OneRegistry:
    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def build(self, name: str, section: Any, *deps: Any) -> Any:
        assert name == "admit-all"
        return self.policy


def test_the_admission_hook_holds_calls_until_a_call_finishes(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentreplay.features.classes import mechanism as run_mod

    policy = _HoldUntilLater()
    monkeypatch.setattr(run_mod, "ADMISSIONS", _OneRegistry(policy))
    res = simulate(
        make_trace([[(500, 5, None)]] * 3),
        SimConfig().replace(cache={"num_gpu_blocks": 400}, workload={"concurrency": 3}),
        perf=LinearPerf(),
    )
    t = res.turns.set_index("program_id")
    assert t["release_s"].tolist() == [0.0, 0.0, 0.0]
    finish0 = float(t.loc["p0", "finish_s"])
    assert finish0 > 0
    assert (t.loc[["p1", "p2"], "first_scheduled_s"] == finish0).all()  # offered again when p0's call ended
    assert policy.asked == [(0, 0.0), (1, 0.0), (2, 0.0), (1, finish0), (2, finish0)]


def test_no_params_is_frozen_and_empty() -> None:
    assert dataclasses.fields(NoParams) == ()
    assert NoParams.__dataclass_params__.frozen  # type: ignore[attr-defined]
