"""inference-perf replay: the client as it ran, the client path, the end-to-end fit and the peer comparison."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.measured.inference_perf import InferencePerfCollector
from tests.collectors.measured import ip_fixtures as FX
from validation.catalog import Catalog
from validation.e2e import inference_perf as ip
from validation.e2e import inference_perf_fit as F
from validation.e2e import peers as P


def _cfg(**kw) -> dict:
    base = {
        "run": "r",
        "stage": 0,
        "stages": [[2.0, 10.0], [4.0, 5.0]],
        "arrivals": "constant",
        "shared_prefix": {
            "num_groups": 2,
            "num_prompts_per_group": 3,
            "system_prompt_len": 100,
            "question_len": 400,
            "output_len": 20,
        },
        "gpu_mem_util": 0.9,
        "max_num_seqs": 128,
        "max_num_batched_tokens": 2048,
        "max_model_len": 4096,
        "replayable": True,
    }
    return {**base, **kw}


def test_client_as_it_ran_constant_rate_cyclic_prompt_pool() -> None:
    trace, stage, note = ip.trace_for(_cfg(), "llama-3.1-8b")
    p, t = trace.programs, trace.turns
    assert len(p) == 2 * 10 + 4 * 5
    assert list(np.bincount(stage)) == [20, 20]
    arr = p["arrival_s"].to_numpy()
    assert np.allclose(np.diff(arr[:20]), 0.5) and np.allclose(np.diff(arr[20:]), 0.25)
    assert arr[20] == pytest.approx(10.0)  # stages back to back
    assert list(p["shared_prefix_id"][:8]) == [f"prompt{i % 6}" for i in range(8)]  # prompt i mod P
    assert (t["output_tokens"] == 20).all() and (t["input_tokens"] == 501).all()  # S + Q + BOS
    assert (p["shared_prefix_tokens"] == t["input_tokens"]).all()
    assert "S + Q + BOS" in note


def test_client_path_and_the_sources_per_token_time() -> None:
    ttft, e2e = np.array([0.01, 0.01]), np.array([1.0, 1.0])
    meas = {"e2e_mean_s": 2.0, "ttft_mean_s": 0.1, "itl_mean_s": 0.01}  # the client counted 191 tokens
    plain = ip.simulated_metrics(ttft, e2e, 100, meas, ip.ClientPath())
    assert plain["itl_mean_s"] == pytest.approx((1.0 - 0.01) / 190)
    c = ip.simulated_metrics(ttft, e2e, 100, meas, ip.ClientPath(0.005, 1e-4, 2.0))
    step = (1.0 - 0.01) / 99
    assert c["ttft_mean_s"] == pytest.approx(0.01 + 0.005 + 2 * step)
    assert c["e2e_mean_s"] == pytest.approx(1.0 + 0.005 + 2 * step + 99e-4)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    root = FX.campaign(tmp_path_factory.mktemp("ip"))
    return InferencePerfCollector().collect(root).tables


def test_replay_reproduces_prefix_reuse_and_windows(campaign: dict[str, pd.DataFrame]) -> None:
    runs, apart = F.runs_from(campaign)
    assert {c for c, _ in apart} == {f"inference-perf/{FX.OVER}/stage0"}
    run = next(r for r in runs if r.name == FX.GT)
    rep = F.replay_runs([run], F.EngineCost(), processes=1)[run.name]
    # 6 prompts recur: every request after the first 6 hits its whole prompt up to the last full block
    assert rep.summary["prefix_hit_rate"] > 0.85
    assert len(rep.arrival) == 60 and rep.summary["preemptions"] == 0
    rows = pd.DataFrame(F.rows([run], {run.name: rep}, campaign, F.EngineCost()))
    assert set(rows["cell_id"].str.rsplit("/", n=1).str[-1]) == {"stage0", "stage1", "run", "first300"}


def test_fit_recovers_a_known_client_path(campaign: dict[str, pd.DataFrame]) -> None:
    """Measurements made by the simulator itself with a known client path: the inner fit finds it again."""
    runs, _ = F.runs_from(campaign)
    run = next(r for r in runs if r.name == FX.GT)
    truth = F.EngineCost(client_ttft_ms=12.0, client_token_us=150.0, client_lag_steps=1.0)
    reps = F.replay_runs([run], truth, processes=1)
    fake = campaign["metrics"].copy()
    sim = pd.DataFrame(F.rows([run], reps, campaign, truth))
    for _, r in sim.iterrows():
        fake.loc[(fake["cell_id"] == r["cell_id"]) & (fake["metric"] == r["metric"]), "value"] = r["simulated"]
    tables = {**campaign, "metrics": fake}
    client, loss = F.fit_client(F._prepared([run], reps, tables), F.EngineCost())
    assert loss < 1e-5
    # one workload cannot tell a fixed delay from a delay of whole steps (its steps all last alike): what is
    # identified is the first token's total delay, and the per-token term from the decode span
    rep = reps[run.name]
    step = float(np.mean((rep.e2e_s - rep.ttft_s) / (rep.output_tokens - 1)))
    assert client["client_ttft_ms"] + 1e3 * client["client_lag_steps"] * step == pytest.approx(
        12.0 + 1e3 * step, rel=0.05
    )
    assert client["client_token_us"] == pytest.approx(150.0, rel=0.05)


def test_peer_table_scores_each_simulator_on_the_same_measurement() -> None:
    ooc = pd.DataFrame(
        {
            "cell_id": ["c/stage0", "c/stage0"],
            "configuration": ["g/m/tp1"] * 2,
            "metric": ["e2e_mean_s", "ttft_mean_s"],
            "measured": [2.0, 0.05],
            "simulated": [2.1, 0.04],
            "rel_error": [0.05, -0.2],
            "stage_cell": [True, True],
        }
    )
    peers = pd.DataFrame(
        {
            "cell_id": ["c/stage0", "c/stage0"],
            "simulator": ["blis-trained-physics", "vidur"],
            "metric": ["e2e_mean_s", "e2e_mean_s"],
            "predicted": [1.8, 2.6],
            "actual": [2.0, 2.0],
        }
    )
    t = P.peer_table(ooc, pd.DataFrame(), peers)
    row = t[t["metric"] == "e2e_mean_s"].iloc[0]
    assert row["agentreplay (out of config.)"] == pytest.approx(5.0)
    assert row["blis-trained-physics"] == pytest.approx(-10.0) and row["vidur"] == pytest.approx(30.0)
    s = P.summary_rows(t).set_index(["simulator", "metric"])
    assert s.loc[("vidur", "e2e_mean_s"), "MAPE %"] == pytest.approx(30.0)
    tg = P.targets(ooc, pd.DataFrame(), t).set_index("metric")
    assert tg.loc["ttft_mean_s", "verdict"].startswith("missed by 5.0 pp")
    assert tg.loc["e2e_mean_s", "verdict"] == "met; on the reference peer's 1 rows 5.0% vs its 10.0%: below it"
    assert P.targets(ooc, pd.DataFrame(), t)["metric"].iloc[0] == "ttft_mean_s"  # misses first


def test_engine_cost_applies_its_terms_to_the_efficiency() -> None:
    from agentreplay.perf import load_gpu

    eff = load_gpu("h100-sxm").efficiency
    cost = F.EngineCost(fixed_ms=1.5, per_seq_us=7.0, kernel_gap_us=2.5)
    out = cost.efficiency(eff)
    assert (out.framework_overhead_ms, out.per_seq_overhead_us, out.kernel_overhead_us) == (1.5, 7.0, 2.5)
    # decode attention streams the KV cache at the GPU's weight-streaming efficiency unless set
    assert out.attn_decode_efficiency == eff.bandwidth_efficiency and out.compute_efficiency == eff.compute_efficiency
    assert dataclasses.replace(cost, attn_decode_efficiency=0.9).efficiency(eff).attn_decode_efficiency == 0.9
    assert F.EngineCost.of(eff) == dataclasses.replace(
        F.EngineCost(), fixed_ms=eff.framework_overhead_ms, kernel_gap_us=eff.kernel_overhead_us
    )


def test_write_and_load_engine_cost(tmp_path: Path) -> None:
    full = F.FitOutcome(F.EngineCost(fixed_ms=0.3, client_lag_steps=1.5), 0.01, 10, ["a", "b"])
    loo = {"a": F.FitOutcome(F.EngineCost(fixed_ms=0.4), 0.02, 10, ["b"])}
    cat = Catalog.create(tmp_path)
    p = F.write_engine_cost(full, loo, cat, runs=["x"])
    assert p == tmp_path / "engine_cost.json"
    assert F.load(cat) == full.cost
    assert F.load_out_of_configuration(cat) == {"a": loo["a"].cost}
    assert json.loads(p.read_text())["runs"] == ["x"]


def test_a_ttft_below_the_prefill_floor_is_not_replayable() -> None:
    from validation.e2e.cells import not_replayable

    assert not_replayable({"ttft_floor_s": 0.05, "measured_ttft_mean_s": 0.08}) == ""
    why = not_replayable({"ttft_floor_s": 0.05, "measured_ttft_mean_s": 0.03})
    assert "below the prefill floor 0.0500 s" in why and "0.0300" in why
    assert not_replayable({}) == ""  # cells without a floor (every other source)


def test_calibrate_engine_cost_cli_writes_the_fit_and_the_left_out_fits(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import agentreplay.cli.validate  # noqa: F401  (registers the commands)
    from agentreplay.cli.app import app

    root = FX.campaign(tmp_path / "campaign")
    out = tmp_path / "catalog"  # a catalog folder: written into it, the packaged one untouched
    res = CliRunner().invoke(
        app, ["calibrate", "--engine-cost", "--measured", str(root), "--out", str(out), "--max-evals", "4", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads((out / "engine_cost.json").read_text())
    # two replayable configurations (Llama-3.1-8B, Qwen3-14B): one fit on both, one without each
    assert set(data["leave_one_configuration_out"]) == {"h100-sxm/llama-3.1-8b/tp1", "h100-sxm/qwen3-14b/tp1"}
    assert [a["cell_id"] for a in data["apart"]] == [f"inference-perf/{FX.OVER}/stage0"]
    assert data["apart"][0]["reason"].startswith("not replayable: overloaded")
    assert F.load(Catalog(out)) == F.EngineCost(**data["fitted"])


def test_a_run_the_simulator_cannot_price_is_listed_not_simulated(tmp_path: Path) -> None:
    """A held-out folder may hold models outside the catalogue: such a run is named with the reason, the rest run."""
    main, _ = FX.error_tables(tmp_path)
    extra = FX._row("vidur", "3-acme-foo-9b-tp1-general-1", "acme/Foo-9B", 0, "e2e_mean", 1000.0, 1100.0)
    main.write_text(main.read_text() + extra + "\n")
    tables = InferencePerfCollector().collect(main).tables
    runs, apart = F.runs_from(tables)
    why = dict(apart)["inference-perf/3-acme-foo-9b-tp1-general-1/stage0"]
    assert why.startswith("not simulated:") and "foo-9b" in why
    assert {r.name for r in runs} == {FX.GT, FX.TD}


def test_the_engine_cost_fit_refuses_a_single_configuration(campaign: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    """Each configuration's headline is the fit without it: with one configuration there is none, said plainly
    (it used to end in an IndexError from fitting no runs)."""
    from validation.e2e import inference_perf_fit as F

    runs, _ = F.runs_from(campaign)
    keep = {r.name for r in runs if r.configuration == "h100-sxm/llama-3.1-8b/tp1"}
    assert keep and len({r.configuration for r in runs}) == 2
    cells = campaign["cells"]
    one = {
        **campaign,
        "cells": cells[
            ~cells["source"].eq("inference-perf")
            | cells["cell_id"].map(lambda c: any(c.startswith(f"inference-perf/{n}/") for n in keep))
        ],
    }
    with pytest.raises(ValueError, match="at least two configurations; the measured sources hold only h100-sxm"):
        F.calibrate(one, catalog=Catalog.create(tmp_path / "catalog"), max_evals=1)


def test_engine_terms_to_fit_are_checked_and_the_tied_ones_priced_at_the_catalogue() -> None:
    from agentreplay.perf import load_gpu

    assert F.check_terms(["fixed_ms", "custom_allreduce_us"]) == ("fixed_ms", "custom_allreduce_us")
    for bad in (["fixed_ms", "nosuch"], ["fixed_ms", "fixed_ms"], []):
        with pytest.raises(ValueError, match="each once, from"):
            F.check_terms(bad)
    eff = load_gpu("h100-sxm").efficiency
    tied = F.EngineCost()
    assert tied.efficiency(eff).custom_allreduce_latency_us == eff.custom_allreduce_latency_us
    assert tied.value("custom_allreduce_us", eff) == eff.custom_allreduce_latency_us
    assert tied.value("attn_decode_efficiency", eff) == eff.bandwidth_efficiency
    freed = dataclasses.replace(tied, custom_allreduce_us=eff.custom_allreduce_latency_us + 2.0)
    assert freed.efficiency(eff).custom_allreduce_latency_us == eff.custom_allreduce_latency_us + 2.0
    assert freed.value("custom_allreduce_us", eff) == eff.custom_allreduce_latency_us + 2.0
    # the sampler's bytes per logit: the catalogue's 8 until fitted
    assert "sampler_bytes_per_logit" in F.ENGINE_TERMS and tied.value("sampler_bytes_per_logit", eff) == 8.0
    fitted = dataclasses.replace(tied, sampler_bytes_per_logit=400.0)
    assert fitted.efficiency(eff).sampler_bytes_per_logit == 400.0
    assert tied.efficiency(eff).sampler_bytes_per_logit == 8.0


def test_calibrate_fit_terms_frees_an_optional_term_and_refuses_unknown_ones(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import agentreplay.cli.validate  # noqa: F401  (registers the commands)
    from agentreplay.cli.app import app

    root = FX.campaign(tmp_path / "campaign")
    base = ["calibrate", "--engine-cost", "--measured", str(root), "--max-evals", "4", "--json"]
    bad = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "no"), "--fit-terms", "fixed_ms,nosuch"])
    assert bad.exit_code != 0 and "nosuch" in bad.output and "custom_allreduce_us" in bad.output
    assert not (tmp_path / "no").exists()
    alone = CliRunner().invoke(app, ["calibrate", "--fit-terms", "fixed_ms"])
    assert alone.exit_code != 0 and "--engine-cost" in alone.output
    out = tmp_path / "catalog"
    res = CliRunner().invoke(app, [*base, "--out", str(out), "--fit-terms", "fixed_ms,custom_allreduce_us"])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "engine_cost.json").read_text())
    assert data["fit_terms"] == ["fixed_ms", "custom_allreduce_us"]
    # the freed term is fitted (a number) in every fit; a term left out keeps the catalogue's value (tied: null)
    for cost in [data["fitted"], *data["leave_one_configuration_out"].values()]:
        assert isinstance(cost["custom_allreduce_us"], float) and cost["attn_decode_efficiency"] is None
    assert F.load(Catalog(out)) == F.EngineCost(**data["fitted"])
