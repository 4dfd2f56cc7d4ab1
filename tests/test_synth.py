"""Synthetic programs: valid append-only traces whose turn counts, tool mix and durations follow the source."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

import agentreplay.cli.tools  # noqa: F401  (registers fit-tools / synth on the app)
from agentreplay.cli.app import app
from agentreplay.sim.tools_generative import ToolSampler, write_tool_model
from agentreplay.synth import synthesize
from agentreplay.trace.io import read_trace, validate
from tests.conftest import ROOT
from tests.factories import make_trace

BUNDLED = ROOT / "datasets" / "swebench-verified"


@pytest.fixture(scope="module")
def source():
    return read_trace(BUNDLED)


@pytest.fixture(scope="module")
def synthetic(source):
    return synthesize(source, 2000, seed=1)


def test_programs_count_and_valid_trace(synthetic) -> None:
    validate(synthetic)
    assert len(synthetic.programs) == 2000
    assert set(synthetic.programs["source"]) == {"synthetic"}
    assert synthetic.programs["program_id"].is_unique
    t = synthetic.turns
    last = t["turn_idx"] == t["program_id"].map(synthetic.programs.set_index("program_id")["n_turns"]) - 1
    assert t.loc[last, "tool_duration_s"].isna().all() and t.loc[last, "tool_duration_kind"].isna().all()
    assert t.loc[~last, "tool_duration_s"].notna().all()
    assert set(t.loc[~last, "tool_duration_kind"]) == {"sampled"}


def test_contexts_are_append_only_with_the_source_shared_prefix(synthetic, source) -> None:
    t = synthetic.turns.sort_values(["program_id", "turn_idx"])
    prev_ctx = (t["input_tokens"] + t["output_tokens"]).groupby(t["program_id"]).shift(1)
    later = t["turn_idx"] > 0
    assert (t.loc[later, "reused_tokens"] == prev_ctx[later]).all()
    assert (t.loc[later, "input_tokens"] >= t.loc[later, "reused_tokens"]).all()
    assert (t.loc[~later, "reused_tokens"] == 0).all()
    first = t[~later].set_index("program_id")["input_tokens"]
    prefix = synthetic.programs.set_index("program_id")["shared_prefix_tokens"]
    assert (first >= prefix.reindex(first.index)).all()
    assert set(synthetic.programs["shared_prefix_id"]) <= set(source.programs["shared_prefix_id"])


def test_distributions_follow_the_source(synthetic, source) -> None:
    ks = stats.ks_2samp(synthetic.programs["n_turns"], source.programs["n_turns"]).statistic
    assert ks < 0.1
    mix_s = synthetic.turns["tool_class"].value_counts(normalize=True)
    mix_r = source.turns["tool_class"].value_counts(normalize=True)
    assert 0.5 * (mix_s - mix_r).abs().sum() < 0.05  # total-variation distance of the tool mix
    for col in ("input_tokens", "output_tokens"):
        assert synthetic.turns[col].median() == pytest.approx(source.turns[col].median(), rel=0.15), col
    assert np.nanmedian(synthetic.turns["tool_duration_s"]) == pytest.approx(
        np.nanmedian(source.turns["tool_duration_s"]), rel=0.1
    )


def test_seeded(source) -> None:
    a = synthesize(source, 50, seed=3)
    b = synthesize(source, 50, seed=3)
    c = synthesize(source, 50, seed=4)
    assert a.turns.equals(b.turns) and a.programs.equals(b.programs)
    assert not a.turns["input_tokens"].equals(c.turns["input_tokens"]) or len(a.turns) != len(c.turns)


def test_tool_durations_from_a_tool_model(source) -> None:
    model = {
        "format": "agentreplay-tool-model",
        "version": 1,
        "provenance": {},
        "default_source": "x",
        "classes": {},
        "overall": {
            "family": "exponential",
            "params": {"scale": 10.0},
            "p_zero": 0.0,
            "n": 1,
            "aic": None,
            "bic": None,
            "ks": None,
            "ks_p": None,
            "ad": None,
            "median_s": None,
            "p90_s": None,
        },
    }
    s = synthesize(source, 300, seed=2, tool_sampler=ToolSampler(model, class_scale={"test": 2.0}))
    d = s.turns.dropna(subset=["tool_duration_s"])
    assert d.loc[d["tool_class"] != "test", "tool_duration_s"].mean() == pytest.approx(10.0, rel=0.1)
    assert d.loc[d["tool_class"] == "test", "tool_duration_s"].mean() == pytest.approx(20.0, rel=0.1)


def test_single_turn_and_missing_durations() -> None:
    src = make_trace([[(50, 3, None)], [(40, 2, None), (60, 4, None), (90, 1, None)]], shared_prefix_tokens=45)
    with pytest.raises(ValueError, match="no tool durations"):
        synthesize(src, 5)
    src = make_trace([[(50, 3, None)], [(40, 2, 1.0), (60, 4, 2.0), (90, 1, None)]], shared_prefix_tokens=45)
    s = synthesize(src, 40, seed=0, jitter=0.0)
    validate(s)
    assert (s.turns.loc[s.turns["turn_idx"] == 0, "input_tokens"] >= 45).all()
    assert set(s.turns["tool_duration_s"].dropna()) <= {1.0, 2.0}
    with pytest.raises(ValueError, match="n_programs"):
        synthesize(src, 0)


def test_synth_command(tmp_path) -> None:
    model = tmp_path / "m.json"
    write_tool_model(
        model,
        {
            "format": "agentreplay-tool-model",
            "version": 1,
            "provenance": {},
            "default_source": "x",
            "classes": {},
            "overall": {
                "family": "lognormal",
                "params": {"mu": 0.0, "sigma": 1.0},
                "p_zero": 0.0,
                "n": 1,
                "aic": None,
                "bic": None,
                "ks": None,
                "ks_p": None,
                "ad": None,
                "median_s": 1.0,
                "p90_s": None,
            },
        },
    )
    res = CliRunner().invoke(
        app,
        [
            "synth",
            "--trace",
            str(BUNDLED),
            "--programs",
            "20",
            "--out",
            str(tmp_path / "out"),
            "--seed",
            "5",
            "--tool-model",
            str(model),
        ],
    )
    assert res.exit_code == 0, res.output
    tr = read_trace(tmp_path / "out")
    assert len(tr.programs) == 20 and set(tr.programs["source"]) == {"synthetic"}
    bad = CliRunner().invoke(app, ["synth", "--trace", str(BUNDLED), "--programs", "0", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "n_programs" in bad.output
