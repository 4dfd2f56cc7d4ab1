"""Spec expansion: grid, zip, seeds, stable ids, and bad values failing before any cell runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agentreplay.sim.config import from_dict
from agentreplay.sweep import SpecError, load_spec, parse_spec
from tests.sweep.conftest import BASE, GRID, write_spec


def spec_dict(trace: Path, grid: dict, **extra: object) -> dict:
    return {
        "sweep": {"trace": str(trace), **extra},
        "base": {"hardware": {"gpu": "h100-sxm", "model": "llama-3.1-8b"}},
        "grid": grid,
    }


def test_grid_is_the_cartesian_product_in_spec_order(tiny_trace: Path, tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path / "s.toml", tiny_trace, GRID))
    assert [p.path for p in spec.params] == ["workload.concurrency", "router.policy", "tools.scale"]
    assert [p.column for p in spec.params] == ["workload_concurrency", "router_policy", "tools_scale"]
    assert [c.label for c in spec.cells][:3] == [
        "concurrency=2 policy=round-robin scale=0.5",
        "concurrency=2 policy=round-robin scale=1",
        "concurrency=2 policy=least-loaded scale=0.5",
    ]
    assert len(spec.cells) == 8
    cfg = from_dict(spec.cells[-1].config)
    assert (cfg.workload.concurrency, cfg.router.policy, cfg.tools.scale) == (4, "least-loaded", 1.0)
    assert (cfg.hardware.instances, cfg.tools.mode) == (2, "scale")  # the base survives the overrides
    assert {c.group for c in spec.cells} == {"concurrency_2", "concurrency_4"}


def test_nested_grid_tables_mean_dotted_paths(tiny_trace: Path) -> None:
    spec = parse_spec(spec_dict(tiny_trace, {"workload": {"concurrency": [1, 2]}}))
    assert [p.path for p in spec.params] == ["workload.concurrency"]


def test_zip_groups_vary_together_and_multiply_the_grid(tiny_trace: Path) -> None:
    data = spec_dict(tiny_trace, {"router.policy": ["round-robin", "least-loaded"]})
    data["zip"] = [{"hardware.gpu": ["h100-sxm", "a100-80gb"], "hardware.tp": [1, 2]}]
    spec = parse_spec(data)
    pairs = {(c.overrides["hardware.gpu"], c.overrides["hardware.tp"]) for c in spec.cells}
    assert pairs == {("h100-sxm", 1), ("a100-80gb", 2)}
    assert len(spec.cells) == 4


def test_zip_lists_of_unequal_length_fail(tiny_trace: Path) -> None:
    data = spec_dict(tiny_trace, {})
    data["zip"] = [{"hardware.gpu": ["h100-sxm", "a100-80gb"], "hardware.tp": [1]}]
    with pytest.raises(SpecError, match="equal lengths"):
        parse_spec(data)


def test_seeds_multiply_cells_and_appear_in_labels(tiny_trace: Path) -> None:
    spec = parse_spec(spec_dict(tiny_trace, {"workload.concurrency": [1, 2]}, seeds=[0, 7]))
    assert [(c.seed, c.label) for c in spec.cells] == [
        (0, "concurrency=1 seed=0"),
        (7, "concurrency=1 seed=7"),
        (0, "concurrency=2 seed=0"),
        (7, "concurrency=2 seed=7"),
    ]
    assert [from_dict(c.config).seed for c in spec.cells] == [0, 7, 0, 7]


def test_max_programs_sets_every_cells_workload(tiny_trace: Path) -> None:
    spec = parse_spec(spec_dict(tiny_trace, {"workload.concurrency": [1, 2]}, max_programs=3))
    assert {from_dict(c.config).workload.max_programs for c in spec.cells} == {3}


def test_cell_ids_hash_the_canonical_overrides_and_seed(tiny_trace: Path) -> None:
    spec = parse_spec(spec_dict(tiny_trace, {"tools.scale": [1], "router.policy": ["round-robin"]}))
    canonical = json.dumps(
        {"overrides": {"router.policy": "round-robin", "tools.scale": 1.0}, "seed": 0},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert spec.cells[0].cell_id == hashlib.sha256(canonical.encode()).hexdigest()[:12]


def test_cell_ids_do_not_depend_on_key_order_or_int_vs_float(tiny_trace: Path) -> None:
    a = parse_spec(spec_dict(tiny_trace, {"tools.scale": [0.5, 1, 2], "router.policy": ["round-robin"]}))
    b = parse_spec(spec_dict(tiny_trace, {"router.policy": ["round-robin"], "tools.scale": [2.0, 1.0, 0.5]}))
    assert {c.cell_id for c in a.cells} == {c.cell_id for c in b.cells}
    assert a.params[0].kind == "float" and a.params[0].values == (0.5, 1.0, 2.0)


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        ({"workload.concurrency": [2], "hardware.tp": [1, 3]}, r"cell 2/2 \w{12} \(tp=3\): \[hardware\] tp = 3"),
        ({"router.policy": ["least-loaded", "random"]}, r"\(policy=random\): \[router\] policy = 'random'"),
        ({"hardware.gpux": ["h100-sxm"]}, r"cell 1/1 .*\[hardware\] unknown field\(s\) \['gpux'\]"),
        ({"bogus.field": [1]}, r"unknown section\(s\) \['bogus'\]"),
        ({"hardware.gpu": ["h100-sxm", "h900"]}, r"\(gpu=h900\): unknown gpu 'h900'"),
    ],
)
def test_a_bad_value_fails_at_expansion_naming_the_cell_and_field(tiny_trace: Path, grid: dict, expected: str) -> None:
    with pytest.raises(SpecError, match=expected):
        parse_spec(spec_dict(tiny_trace, grid))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"sweep": {}}, "trace"),
        ({"sweep": {"trace": "/nonexistent/trace"}}, "no such folder"),
        ({"grid": {"workload.concurrency": 4}}, "non-empty list"),
        ({"grid": {"seed": [1, 2]}}, "seeds"),
        ({"grid": {"tools.scale": [1, "x"]}}, "mix types"),
        ({"sweep": {"trace": "TRACE", "seeds": []}}, "seeds"),
        ({"sweep": {"trace": "TRACE", "workers": 3}}, "unknown key"),
        ({"base": {"hardware": {"tp": 3}}}, r"\[base\]"),
        ({"extra": {}}, "unknown table"),
    ],
)
def test_malformed_specs_fail_with_the_key(tiny_trace: Path, data: dict, expected: str) -> None:
    full = {"sweep": {"trace": str(tiny_trace)}, "grid": {}}
    full.update(data)  # a given [sweep] replaces the default one whole
    if full["sweep"].get("trace") == "TRACE":
        full["sweep"] = {**full["sweep"], "trace": str(tiny_trace)}
    with pytest.raises(SpecError, match=expected):
        parse_spec(full)


def test_relative_trace_resolves_against_the_spec_folder(
    tiny_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec_file = tiny_trace.parent / "spec.toml"
    spec_file.write_text(f'[sweep]\ntrace = "{tiny_trace.name}"\n' + BASE)
    assert load_spec(spec_file).trace == tiny_trace.resolve()
    assert [c.label for c in load_spec(spec_file).cells] == ["base"]
