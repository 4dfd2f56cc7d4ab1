"""Generative tool mode: the model file (round trip, validation errors), the seeded sampler and its scaling,
each family's draw/CDF/quantile agreeing, and GenerativeTools on the bundled workload."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from scipy import stats

from agentreplay.sim.tools_generative import (
    FAMILIES,
    ClassDist,
    GenerativeTools,
    ToolModelError,
    ToolSampler,
    load_tool_model,
    write_tool_model,
)
from agentreplay.sim.workload import compile_trace
from agentreplay.trace.io import read_trace
from tests.conftest import ROOT

PARAMS = {
    "exponential": {"scale": 2.0},
    "lognormal": {"mu": 0.3, "sigma": 0.9},
    "gamma": {"shape": 1.7, "scale": 0.8},
    "weibull_min": {"c": 0.9, "scale": 1.5},
    "pareto": {"b": 2.5, "scale": 0.1},
    "lognormal_mix2": {"w": 0.3, "mu1": -3.0, "sigma1": 0.4, "mu2": 1.0, "sigma2": 0.6},
}


def _entry(family: str, params: dict[str, float], p_zero: float = 0.0) -> dict:
    return {
        "family": family,
        "params": params,
        "p_zero": p_zero,
        "n": 100,
        "aic": 1.0,
        "bic": 2.0,
        "ks": 0.01,
        "ks_p": 0.5,
        "ad": 0.3,
        "median_s": None,
        "p90_s": None,
    }


def model_dict() -> dict:
    return {
        "format": "agentreplay-tool-model",
        "version": 1,
        "provenance": {"inputs": []},
        "default_source": "test:measured",
        "classes": {
            "test": _entry("lognormal", {"mu": 1.0, "sigma": 0.5}),
            "read": _entry("gamma", {"shape": 2.0, "scale": 0.01}, p_zero=0.1),
        },
        "overall": _entry("exponential", {"scale": 3.0}),
    }


def test_round_trip(tmp_path) -> None:
    path = write_tool_model(tmp_path / "m.json", model_dict())
    spec = load_tool_model(path)
    assert spec.default_source == "test:measured" and spec.version == 1
    read = spec.classes["read"]
    assert read == ClassDist("gamma", {"shape": 2.0, "scale": 0.01}, 0.1, 100, read.stats)
    assert spec.dist("edit") is spec.overall  # no fit for edit: overall
    assert load_tool_model(json.loads(path.read_text())) == spec
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("format"), "format: missing"),
        (lambda m: m.update(version=2), "version: 2, this agentreplay reads version 1"),
        (lambda m: m["classes"].update(compile={}), "classes: unknown tool class(es) ['compile']"),
        (lambda m: m["classes"]["test"].update(family="normal"), "classes.test.family: 'normal' is not one of"),
        (lambda m: m["classes"]["test"]["params"].pop("sigma"), "classes.test.params: family 'lognormal' takes"),
        (lambda m: m["classes"]["test"]["params"].update(sigma=-1.0), "classes.test.params: sigma must be > 0"),
        (lambda m: m["classes"]["test"]["params"].update(mu="a"), "classes.test.params.mu: must be a finite number"),
        (lambda m: m["classes"]["read"].update(p_zero=1.0), "classes.read.p_zero: must be in [0, 1)"),
        (lambda m: m["classes"]["read"].update(n=0), "classes.read.n: must be an integer >= 1"),
        (lambda m: m["classes"]["read"].pop("aic"), "classes.read: missing field(s) ['aic']"),
        (lambda m: m["overall"].update(ks=math.inf), "overall.ks: must be a finite number or null"),
        (lambda m: m.pop("overall"), "overall: missing"),
    ],
)
def test_validation_errors_name_the_field(tmp_path, edit, message) -> None:
    m = copy.deepcopy(model_dict())
    edit(m)
    (tmp_path / "bad.json").write_text(json.dumps(m))
    with pytest.raises(ToolModelError) as exc:
        load_tool_model(tmp_path / "bad.json")
    assert message in str(exc.value) and "bad.json" in str(exc.value)


def test_unreadable_file(tmp_path) -> None:
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(ToolModelError, match="cannot read tool model"):
        load_tool_model(tmp_path / "m.json")


def test_sampler_is_deterministic_and_uses_only_the_generator() -> None:
    s = ToolSampler(model_dict())
    np.random.seed(0)  # the global RNG must not matter
    a = s.sample("test", np.random.default_rng(7), 1000)
    np.random.seed(1)
    b = s.sample("test", np.random.default_rng(7), 1000)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, s.sample("test", np.random.default_rng(8), 1000))
    x = s.sample("read", np.random.default_rng(7))
    assert isinstance(x, float)
    zeros = s.sample("read", np.random.default_rng(9), 20000)
    assert (zeros == 0).mean() == pytest.approx(0.1, abs=0.01)


def test_scale_and_class_override_scale_the_median_exactly() -> None:
    base = ToolSampler(model_dict())
    scaled = ToolSampler(model_dict(), scale=2.0, class_scale={"test": 3.0})
    for cls, k in (("test", 6.0), ("read", 2.0), ("edit", 2.0)):
        a = base.sample(cls, np.random.default_rng(3), 5001)
        b = scaled.sample(cls, np.random.default_rng(3), 5001)
        assert np.median(b) == pytest.approx(k * np.median(a), rel=1e-12)
        assert scaled.quantile(cls, 0.5) == pytest.approx(k * base.quantile(cls, 0.5), rel=1e-12)
        assert scaled.mean(cls) == pytest.approx(k * base.mean(cls), rel=1e-12)
    assert base.quantile("test", 0.5) == pytest.approx(math.e)  # lognormal median exp(mu)
    with pytest.raises(ValueError, match="unknown tool class"):
        ToolSampler(model_dict(), class_scale={"tests": 2.0})
    with pytest.raises(ValueError, match="scale must be >= 0"):
        ToolSampler(model_dict(), scale=-1)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_draws_agree_with_its_cdf_quantile_and_mean(family) -> None:
    d = ClassDist(family, PARAMS[family], 0.0, 1)
    x = d.draw(np.random.default_rng(11), 20000)
    assert stats.kstest(x, d.cdf).statistic < 0.015
    q = np.array([0.1, 0.5, 0.9])
    assert np.allclose(d.cdf(d.ppf(q)), q, atol=1e-9)
    assert x.mean() == pytest.approx(d.mean(), rel=0.05)
    # logpdf integrates to the CDF: a midpoint sum over the body
    grid = np.linspace(float(d.ppf(0.2)), float(d.ppf(0.8)), 20001)
    mid = (grid[1:] + grid[:-1]) / 2
    area = float(np.sum(np.exp(FAMILIES[family].logpdf(d.params, mid)) * np.diff(grid)))
    assert area == pytest.approx(0.6, abs=1e-4)


@pytest.fixture(scope="module")
def bundled():
    from validation.tools.model import fit_tools

    path = ROOT / "datasets" / "swebench-verified"
    return compile_trace(read_trace(path)), fit_tools([path]).model


def test_generative_tools_mean_gap_per_class_matches_the_model(bundled) -> None:
    workload, model = bundled
    tools = GenerativeTools(workload, model)
    spec = load_tool_model(model)
    rng = np.random.default_rng(0)
    classes = np.array(workload.tool_class)
    for cls in sorted(set(classes.tolist())):
        turns = np.flatnonzero(classes == cls)
        draws = [tools.gap_s(int(turns[i % len(turns)]), rng) for i in range(8000)]
        want = spec.dist(cls).mean()
        assert np.mean(draws) == pytest.approx(want, rel=0.1), cls
        assert min(draws) >= 0


def test_generative_tools_scales_and_accepts_a_sampler(bundled) -> None:
    workload, model = bundled
    t = int(np.flatnonzero(np.array(workload.tool_class) == "test")[0])
    plain = GenerativeTools(workload, model)
    scaled = GenerativeTools(workload, ToolSampler(model, scale=2.0), scale=1.5, class_scale={"test": 2.0})
    a = [plain.gap_s(t, np.random.default_rng(s)) for s in range(50)]
    b = [scaled.gap_s(t, np.random.default_rng(s)) for s in range(50)]
    assert np.allclose(b, 6.0 * np.array(a))
