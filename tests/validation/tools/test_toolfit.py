"""Tool-gap fitting: parameter recovery and AIC choice on known laws, the model file it writes, the report and
the fit-tools command, and the fits on the real traces (measured Claude Code vs estimated mini-swe-agent)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import agentreplay.cli.tools  # noqa: F401  (registers fit-tools / synth on the app)
from agentreplay.cli.app import app
from agentreplay.sim.tools_generative import load_tool_model
from agentreplay.trace.io import write_trace
from tests.conftest import ROOT, shared_path
from tests.factories import make_trace
from validation.tools.fit import fit_class, fit_classes, fit_lognormal_mix2
from validation.tools.model import (
    compare_sources,
    fit_table,
    fit_tools,
    load_durations,
    repo_covariate,
    write_model,
    write_report,
)

BUNDLED = ROOT / "datasets" / "swebench-verified"
N = 5000


def _close(got: dict[str, float], want: dict[str, float], rel: float) -> None:
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=rel, abs=rel * 0.1), (k, got, want)


def test_recovers_lognormal_and_aic_picks_it() -> None:
    x = np.random.default_rng(1).lognormal(0.5, 1.2, N)
    f = fit_class(x)
    assert f is not None and f.chosen.family == "lognormal"
    _close(f.chosen.params, {"mu": 0.5, "sigma": 1.2}, 0.04)
    assert f.ad_p is not None  # scipy's Anderson-Darling table covers the lognormal (norm on ln x)
    assert f.chosen.ks_p > 0.01


def test_recovers_gamma_and_aic_picks_it() -> None:
    x = np.random.default_rng(2).gamma(2.0, 3.0, N)
    f = fit_class(x)
    assert f is not None and f.chosen.family == "gamma"
    _close(f.chosen.params, {"shape": 2.0, "scale": 3.0}, 0.04)
    assert f.ad_p is None and "not available" in f.ad_method
    assert f.chosen.bic < min(g.bic for g in f.fits[1:])


def test_recovers_bimodal_mixture_and_aic_picks_it() -> None:
    rng = np.random.default_rng(3)
    first = rng.random(N) < 0.4
    x = np.exp(np.where(first, rng.normal(-3.0, 0.5, N), rng.normal(1.0, 0.7, N)))
    f = fit_class(x)
    assert f is not None and f.chosen.family == "lognormal_mix2"
    _close(f.chosen.params, {"w": 0.4, "mu1": -3.0, "sigma1": 0.5, "mu2": 1.0, "sigma2": 0.7}, 0.04)


def test_mixture_em_orders_components_and_rejects_nothing_unimodal() -> None:
    rng = np.random.default_rng(4)
    p = fit_lognormal_mix2(np.concatenate([rng.normal(2, 0.3, 500), rng.normal(-2, 0.3, 1500)]))
    assert p is not None and p["mu1"] < p["mu2"] and p["w"] == pytest.approx(0.75, abs=0.03)


def test_zero_mass_is_a_point_mass_plus_the_positive_fit() -> None:
    rng = np.random.default_rng(5)
    x = rng.lognormal(1.0, 0.8, N)
    x[rng.random(N) < 0.2] = 0.0
    f = fit_class(x)
    assert f is not None and f.chosen.family == "lognormal"
    assert f.p_zero == pytest.approx(0.2, abs=0.02)
    _close(f.chosen.params, {"mu": 1.0, "sigma": 0.8}, 0.04)
    d = f.dist()
    assert float(d.ppf(0.1)) == 0.0 and float(d.ppf(0.5)) > 0
    assert float(d.cdf(0.0)) == pytest.approx(f.p_zero)
    assert f.chosen.k == 3  # mu, sigma, p_zero


def test_tiny_and_all_zero_classes() -> None:
    f = fit_class(np.array([2.0, 4.0]))
    assert f is not None and [g.family for g in f.fits] == ["exponential"]
    assert f.chosen.params["scale"] == pytest.approx(3.0)
    assert fit_class(np.zeros(10)) is None
    fits, overall, skipped = fit_classes(
        np.array(["a"] * 3 + ["b"] * 20), np.r_[np.zeros(3), np.random.default_rng(0).exponential(1, 20)]
    )
    assert skipped == ["a"] and set(fits) == {"b"} and overall.n == 23
    with pytest.raises(ValueError, match="negative"):
        fit_class(np.array([1.0, -1.0]))


@pytest.fixture(scope="module")
def bundled_fit():
    return fit_tools([BUNDLED])


def test_model_file_round_trip_from_a_fit(bundled_fit, tmp_path) -> None:
    path = write_model(bundled_fit, tmp_path / "m.json")
    spec = load_tool_model(path)
    raw = json.loads(path.read_text())
    assert raw["format"] == "agentreplay-tool-model" and raw["version"] == 1
    assert raw["provenance"]["inputs"][0]["n"] == len(bundled_fit.durations)
    assert raw["provenance"]["inputs"][0]["source_commit"]  # from the bundled MANIFEST.json
    for c, e in raw["classes"].items():
        assert spec.classes[c].family == e["family"] and spec.classes[c].params == e["params"]
        assert float(spec.classes[c].ppf(0.5)) == pytest.approx(e["median_s"])


def test_bundled_trace_gets_a_model_for_every_class_present(bundled_fit) -> None:
    d = bundled_fit.durations
    present = set(d.loc[d["duration_s"] > 0, "tool_class"])
    # submit has one duration: too few for a model of its own (MIN_CLASS_N), pooled with overall
    assert bundled_fit.pooled == {"submit": 1}
    assert bundled_fit.model["provenance"]["pooled_classes"] == {"submit": 1}
    assert set(bundled_fit.model["classes"]) == present - {"submit"}
    assert set(d["kind"]) == {"estimated"}
    table = fit_table(bundled_fit)
    assert list(table["class"]) == [*bundled_fit.fits, "overall"]
    big = table[table["n"] > 1000]
    # medians of the model within 10% of the data's (the families are chosen well enough for the body)
    assert np.allclose(big["median_s"], big["emp_median_s"], rtol=0.1)


def test_repository_covariate_table(bundled_fit) -> None:
    d = bundled_fit.durations
    row = repo_covariate(d, "test", min_rows=1)
    assert row is not None and row["repos"] >= 5
    assert {"adj_r2", "aic_uncond", "aic_repo", "delta_aic", "bic_uncond", "bic_repo", "improves"} <= set(row)
    # The intercept-only OLS on ln d is the unconditional lognormal: same AIC as the fitter's.
    pos = d.loc[(d["tool_class"] == "test") & (d["duration_s"] > 0), "duration_s"].to_numpy()
    f = fit_class(pos)
    assert f is not None
    lognormal = next(g for g in f.fits if g.family == "lognormal")
    assert row["n"] == len(pos) and row["aic_uncond"] == pytest.approx(lognormal.aic, rel=1e-9)
    assert row["delta_aic"] == pytest.approx(row["aic_repo"] - row["aic_uncond"])


def test_report_writes_markdown_and_plots(tmp_path) -> None:
    rng = np.random.default_rng(6)
    import pandas as pd

    d = pd.DataFrame(
        {
            "trace": "t",
            "source": "s",
            "program_id": "p",
            "task_id": "r__1",
            "repo": "r",
            "tool_class": "test",
            "duration_s": rng.lognormal(1, 0.5, 300),
            "kind": "measured",
        }
    )
    fits, overall, skipped = fit_classes(d["tool_class"].to_numpy(), d["duration_s"].to_numpy())
    from validation.tools.model import ToolFitResult

    result = ToolFitResult(
        {"default_source": "s:measured", "provenance": {"unit": "turn", "inputs": []}}, fits, overall, skipped, d
    )
    md = write_report(result, tmp_path / "r", comparison=compare_sources(d, d, "a", "b"))
    text = md.read_text()
    assert "## test" in text and "## overall" in text and "two-sample KS" in text
    for c in ("test", "overall"):
        assert (tmp_path / "r" / f"qq_{c}.png").stat().st_size > 1000
        assert (tmp_path / "r" / f"cdf_{c}.png").stat().st_size > 1000


def test_fit_tools_command(tmp_path) -> None:
    rng = np.random.default_rng(8)
    trace = make_trace([[(100 + 10 * t, 5, float(rng.lognormal(0, 1))) for t in range(30)] for _ in range(10)])
    write_trace(tmp_path / "tr", trace)
    res = CliRunner().invoke(app, ["fit-tools", str(tmp_path / "tr"), "--out", str(tmp_path / "m.json")])
    assert res.exit_code == 0, res.output
    assert "lognormal" in res.output and "overall" in res.output
    spec = load_tool_model(tmp_path / "m.json")
    assert set(spec.classes) == {"test"} and spec.classes["test"].n == 290
    bad = CliRunner().invoke(app, ["fit-tools", str(tmp_path), "--out", str(tmp_path / "x.json")])
    assert bad.exit_code == 1 and "programs.parquet missing" in bad.output


@pytest.mark.shared
def test_measured_claude_code_vs_estimated_mini_swe_agent(tmp_path_factory, bundled_fit) -> None:
    from collectors.registry import collect

    out = tmp_path_factory.mktemp("cc")
    collect("claude-code", shared_path("datasets", "swe-rebench-claude-code"), out)
    measured = load_durations(out, kind="measured")
    assert len(measured) > 5000 and set(measured["kind"]) == {"measured"}
    table = compare_sources(measured, bundled_fit.durations, "measured", "estimated")
    both = set(measured["tool_class"]) & set(bundled_fit.durations["tool_class"])
    assert set(table["class"]) == both | {"all"}
    assert both >= {"test", "edit", "read", "search", "build", "vcs"}
    # Measured reads/searches take tens of milliseconds; the estimated gaps carry seconds of LLM-latency error.
    row = table.set_index("class").loc["read"]
    assert row["median_measured_s"] < 0.1 < row["median_estimated_s"]
    calls = load_durations(out, unit="call", kind="measured")
    assert len(calls) > len(measured)  # parallel calls: more calls than turns
