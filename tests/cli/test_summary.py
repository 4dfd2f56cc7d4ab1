"""``simulate``'s summary: every group of a heterogeneous cluster, saturation findings (12)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.diagnose import HIT_RATE_SHARE, MIN_QUEUED_S, QUEUE_SHARE_OF_TTFT, diagnose, reusable_tokens
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

runner = CliRunner()
#: 24 programs of 4 turns, each turn extending the previous context by 3,000 tokens
GROWING = make_trace([[(2000 + 3000 * t, 50, 0.5) for t in range(4)] for _ in range(24)])


def test_summary_describes_every_group(tmp_path) -> None:
    write_trace(tmp_path / "tr", make_trace([[(500, 20, None)]] * 2))
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tmp_path / "tr"),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--model",
            "llama-3.1-8b",
            "--group",
            "h100-sxm:1:2",
            "--group",
            "a100-80gb:2:1",
        ],
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "2 x llama-3.1-8b bf16 on 1x h100-sxm" in text
    assert "1 x llama-3.1-8b bf16 on 2x a100-80gb" in text
    assert "max_num_seqs 256" in text  # the A100 group's own vLLM default, not the H100's 1024
    assert "3 x" not in text


def test_queue_bound_run_is_called_saturated_with_its_figures(tmp_path) -> None:
    write_trace(tmp_path / "tr", GROWING)
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tmp_path / "tr"),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--concurrency",
            "24",
            "--max-num-seqs",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "saturated: queueing is" in text and "of the" in text and "mean TTFT" in text
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    (f,) = [f for f in summary["findings"] if f["kind"] == "queue-bound"]
    assert f["figures"]["queued_mean_s"] >= MIN_QUEUED_S
    assert f["figures"]["queued_share_of_ttft"] >= QUEUE_SHARE_OF_TTFT
    assert f["figures"]["ttft_mean_s"] == summary["ttft_s"]["mean"]
    js = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tmp_path / "tr"),
            "--out",
            str(tmp_path / "o"),
            "--json",
            "--concurrency",
            "24",
            "--max-num-seqs",
            "1",
        ],
    )
    assert js.exit_code == 0 and json.loads(js.output)["findings"][0]["kind"] == "queue-bound"


def test_round_robin_collapses_reuse_and_the_finding_names_the_router() -> None:
    res = simulate(
        GROWING,
        SimConfig().replace(workload={"concurrency": 24}, hardware={"instances": 4}, router={"policy": "round-robin"}),
    )
    reusable = reusable_tokens(GROWING.turns, res.turns)
    (f,) = diagnose(res.summary, res.turns, reusable)
    assert f.kind == "reuse-collapse" and "round-robin" in f.message
    assert f.figures["prefix_hit_rate"] < HIT_RATE_SHARE * f.figures["reusable_share"]
    assert f.figures["moved_turn_share"] > 0.5


def test_an_unloaded_run_with_affinity_has_no_finding() -> None:
    res = simulate(
        GROWING,
        SimConfig().replace(
            workload={"concurrency": 2}, hardware={"instances": 2}, router={"policy": "session-affinity"}
        ),
    )
    assert diagnose(res.summary, res.turns, reusable_tokens(GROWING.turns, res.turns)) == []
