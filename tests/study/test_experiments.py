"""Every experiment is a controlled one: its cells differ only in the config paths it declares."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from agentreplay.sim.workload import Workload
from agentreplay.study.experiments import experiments
from agentreplay.study.spec import StudyOptions, write_bimodal
from agentreplay.sweep import parse_spec


def _leaves(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict) and k != "class_scale":
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _differing(cells: list[Any]) -> set[str]:
    diff: set[str] = set()
    leaves = [_leaves({k: v for k, v in c.config.items() if k != "seed"}) for c in cells]
    for a, b in itertools.pairwise(leaves):
        diff |= {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    return diff


@pytest.fixture()
def exps(tiny: StudyOptions, workload: Workload, tmp_path: Path) -> list[Any]:
    return experiments(tiny, workload, write_bimodal(tmp_path / "bimodal.json"))


def test_cells_vary_only_the_declared_axes(exps: list[Any], tmp_path: Path) -> None:
    for exp in exps:
        spec = parse_spec(exp.spec, base_dir=tmp_path)
        diff = _differing(list(spec.cells))
        assert diff <= set(exp.varies), (exp.name, diff - set(exp.varies))
        assert diff, exp.name  # something does vary


def test_one_policy_axis_at_a_time(exps: list[Any], tmp_path: Path) -> None:
    by = {e.name: e for e in exps}
    axes = {
        "routing": {"router.policy"},
        "queue": {"policy.queue"},
        "tiers": {"tiers.dram_gib", "tiers.cxl_gib"},
        "retention": {"policy.retention", "policy.continuum_max_ttl_s"},
    }
    for name, policy_paths in axes.items():
        diff = _differing(list(parse_spec(by[name].spec, base_dir=tmp_path).cells))
        assert diff - {"workload.rate_per_s"} == policy_paths, name


def test_the_grid_has_80_cells_of_4_gpus_2_models_10_policies(exps: list[Any], tmp_path: Path) -> None:
    grid = next(e for e in exps if e.name == "grid")
    cells = parse_spec(grid.spec, base_dir=tmp_path).cells
    assert len(cells) == 80
    assert {c.config["hardware"]["gpu"] for c in cells} == {"h100-sxm", "b200", "rtxpro6000", "rtx3090"}
    assert {c.config["hardware"]["model"] for c in cells} == {"llama-3.1-8b", "llama-3.1-70b"}


def test_the_eta_experiment_sets_the_requested_ratios(exps: list[Any], workload: Workload) -> None:
    exp = next(e for e in exps if e.name == "reuse-eta")
    assert exp.x_values is not None
    etas = sorted(exp.x_values.values())
    assert etas[:5] == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9], abs=0.005)
