"""``max_model_len``: over-long requests are rejected and counted, the rest run (vLLM InputProcessor)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentreplay.cli.app import app
from agentreplay.sim import CapacityError, simulate
from agentreplay.sim.admission import apply_max_model_len
from agentreplay.sim.config import ConfigError, SimConfig
from agentreplay.sim.workload import compile_trace
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

#: one 106k-token request among short ones, and an agent program whose second call is too long
PROGRAMS = [
    [(106_000, 100, None)],
    [(2_000, 50, None)],
    [(3_000, 40, None)],
    [(1_000, 10, 1.0), (40_000, 10, 1.0), (41_200, 5, None)],
    [(32_000, 2_000, None)],
]


def _cfg(max_model_len: int | None) -> SimConfig:
    return SimConfig().replace(
        hardware={"gpu": "rtx3090", "model": "llama-3.1-8b"}, scheduler={"max_model_len": max_model_len}
    )


def test_without_a_limit_the_whole_trace_is_refused() -> None:
    with pytest.raises(CapacityError, match="set --max-model-len"):
        simulate(make_trace(PROGRAMS), _cfg(None))


def test_rejected_requests_are_counted_and_the_rest_run() -> None:
    res = simulate(make_trace(PROGRAMS), _cfg(32_768))
    rej = res.summary["rejected"]
    assert (rej["rejected_requests"], rej["programs_removed"], rej["programs_cut"], rej["calls_not_run"]) == (
        2,
        1,
        1,
        1,
    )
    assert rej["rejected_prompt_tokens"] == 106_000 + 40_000
    assert (rej["length_capped_requests"], rej["output_tokens_cut"]) == (1, 2_000 - 768)
    assert rej["examples"][0] == "p0 turn 0: 106,000 prompt tokens"
    assert res.programs["program_id"].tolist() == ["p1", "p2", "p3", "p4"]
    turns = res.turns.set_index(["program_id", "turn_idx"])
    assert len(turns) == 4 and ("p3", 1) not in turns.index  # p3 ran its first call only
    assert turns.loc[("p4", 0), "output_tokens"] == 768  # stopped at max_model_len (check_stop)
    assert res.summary["programs"] == 4


def test_admission_rule_is_vllms() -> None:
    """``prompt >= max_model_len`` is rejected (no room for one output token); one token below runs with 1."""
    w = compile_trace(make_trace([[(100, 5, None)], [(99, 5, None)]]))
    kept, rej = apply_max_model_len(w, 100)
    assert kept.program_ids == ["p1"] and kept.output_tokens.tolist() == [1]
    assert (rej.rejected_requests, rej.length_capped) == (1, 1)
    same, none = apply_max_model_len(w, 1_000)
    assert same is w and none.rejected_requests == 0
    with pytest.raises(ValueError, match="every program's first request is rejected"):
        apply_max_model_len(w, 50)


def test_a_limit_the_cache_cannot_hold_refuses_to_start_like_vllm() -> None:
    with pytest.raises(CapacityError, match="max_model_len 131,072 needs 8192 KV blocks"):
        simulate(make_trace(PROGRAMS[1:3]), _cfg(131_072))
    with pytest.raises(ConfigError, match="max_model_len"):
        _cfg(1)


def test_cli_reports_the_rejections(tmp_path) -> None:
    write_trace(tmp_path / "t", make_trace(PROGRAMS))
    out = tmp_path / "o"
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tmp_path / "t"),
            "--gpu",
            "rtx3090",
            "--model",
            "llama-3.1-8b",
            "--max-model-len",
            "32768",
            "--out",
            str(out),
            "--quiet",
        ],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 0, r.output
    assert "2 request(s) rejected" in r.output
    assert json.loads((out / "summary.json").read_text())["rejected"]["rejected_requests"] == 2
    assert "max_model_len = 32768" in (out / "config.toml").read_text()
