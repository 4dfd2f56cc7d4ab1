"""LLMPerf's client reconstructed: quantile draws, the thread loop, the launch spread, the KV demand, the cut of a
simulated run to the requests the client sends, the judged flag, and the RTX 3090 BF16 cell replayed with it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import shared_path
from validation.catalog import PACKAGED
from validation.e2e import llmperf as E
from validation.e2e import llmperf_client as C

DIST = {"min": 1.0, "max": 8.0, "quantiles": {"p25": 2.0, "p50": 3.0, "p75": 4.0, "p90": 5.0, "p95": 6.0, "p99": 7.0}}


def test_quantile_draws_by_hand() -> None:
    pts = C.quantile_points(DIST)
    assert pts[0].tolist() == [0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0]
    # probabilities 1/8, 3/8, 5/8, 7/8, linear between the recorded quantiles
    assert C.spaced(pts, 4) == pytest.approx([1.5, 2.5, 3.5, 4.0 + 0.125 / 0.15])
    shuffled = C.spaced(pts, 4, np.random.default_rng(1))
    assert sorted(shuffled) == pytest.approx(C.spaced(pts, 4).tolist())
    with pytest.raises(ValueError, match=r"quantile 0\.5 missing"):
        C.quantile_points({**DIST, "quantiles": {**DIST["quantiles"], "p50": None}}, "x")
    with pytest.raises(ValueError, match="decrease"):
        C.quantile_points({**DIST, "max": 0.5})


def test_client_loop_by_hand() -> None:
    # thread 1 finishes first (t=2) and, 1 of 2 recorded, re-sends (prompt (1 + 2) % 2 = 1) until t=7; thread 0's
    # request is the 2nd completion (t=3): it stops. The test ends when thread 1 joins.
    run = C.client_loop(np.array([0.0, 1.0]), np.array([[3.0, 3.0], [1.0, 5.0]]), requests=2)
    assert run.thread.tolist() == [1, 0, 1] and run.round.tolist() == [0, 0, 1]
    assert run.prompt.tolist() == [1, 0, 1]
    assert run.start_s.tolist() == [1.0, 0.0, 2.0] and run.finish_s.tolist() == [2.0, 3.0, 7.0]
    assert run.recorded.tolist() == [True, True, False]
    assert run.span_s == 7.0 and run.nth_completion_s == 3.0
    with pytest.raises(ValueError, match="more than 1 rounds"):
        C.client_loop(np.array([0.0, 1.0]), np.array([[3.0], [1.0]]), requests=2)


def test_launch_spread_by_hand() -> None:
    # two threads, every request 2 s: thread 0 (start 0) is recorded at 2 and re-sends until 4; thread 1 (start A)
    # is recorded at A + 2. Span = max(4, A + 2): a 5 s span needs A = 3; a 4 s span is already a burst's
    d = np.full((2, 4), 2.0)
    a, note = C.solve_spread(5.0, d, 2)
    assert a == pytest.approx(3.0, abs=1e-9) and "solved" in note
    a, note = C.solve_spread(4.0, d, 2)
    assert a == 0.0 and "burst" in note
    launch = C.reconstruct(
        C.quantile_points(
            {"min": 2.0, "max": 2.0, "quantiles": dict.fromkeys(("p25", "p50", "p75", "p90", "p95", "p99"), 2.0)}
        ),
        C.quantile_points(DIST),
        2,
        2,
        5.0,
        seed=0,
    )
    assert launch.spread_s == pytest.approx(3.0, abs=1e-9) and launch.starts_s.tolist() == pytest.approx([0, 3])


def test_kv_demand_by_hand() -> None:
    # one request: sent at 0, first token at 1, done at 2; 32 prompt + 16 output tokens, 16-token blocks: 2 blocks
    # while prefilling, 3 just before it finishes (48 tokens)
    run = C.client_loop(np.zeros(1), np.array([[2.0]]), requests=1)
    launch = C.Launch(0.0, np.zeros(1), run, np.array([1.0]), "")
    kv = C.kv_demand(launch, np.array([32]), np.array([16]), block_size=16, points=5)
    assert kv.peak_blocks == 3 and kv.peak_in_flight == 1
    assert kv.blocks[kv.times_s == 0.5].tolist() == [2.0]
    assert kv.blocks[kv.times_s == 2.0].tolist() == [0.0]  # finished


def test_client_cut_applies_the_stop_rule() -> None:
    # two threads, two recorded: completions 000/0 at 1, 001/0 at 2 (the 2nd: thread 1 stops), 000/1 at 3 (sent,
    # not recorded), 000/2 and 001/1 never sent by the client
    turns = pd.DataFrame(
        {
            "program_id": ["thread000"] * 3 + ["thread001"] * 2,
            "turn_idx": [0, 1, 2, 0, 1],
            "finish_s": [1.0, 3.0, 4.0, 2.0, 5.0],
        }
    )
    sends, recorded = E.client_cut(turns, threads=2, requests=2)
    assert sends.tolist() == [2, 1]
    assert recorded.tolist() == [True, False, False, True, False]


def test_client_trace_prefix_states() -> None:
    inp, out = np.array([100, 200]), np.array([10, 20])
    t = E.client_trace(np.array([0.0, 0.5]), np.array([2, 1]), 2, 2, inp, out, "llama-3.1-8b", "off")
    assert t.turns["input_tokens"].tolist() == [100, 100, 200]  # a thread re-sends its own prompt
    assert t.turns["tool_duration_s"].isna().tolist() == [False, True, True]
    assert t.programs["shared_prefix_id"].isna().all()
    w = E.client_trace(np.array([0.0, 0.5]), np.array([2, 1]), 2, 2, inp, out, "llama-3.1-8b", "warm")
    p = w.programs.set_index("program_id")
    assert p.loc["thread001", "arrival_s"] == E.WARM_OFFSET_S + 0.5
    assert p.loc["warmup001", "shared_prefix_id"] == p.loc["thread001", "shared_prefix_id"] == "prompt1"
    assert p.loc["warmup001", "shared_prefix_tokens"] == 199 and p.loc["warmup001", "arrival_s"] == 0.0
    with pytest.raises(ValueError, match="prefix"):
        E.client_trace(np.zeros(2), np.ones(2), 2, 2, inp, out, "llama-3.1-8b", "cold")


def test_judged_flag_only_for_metrics_fixed_by_construction() -> None:
    rows = [
        {"metric": m, "note": "n"} for m in ("ttft_mean_s", "e2e_p99_s", "throughput_output_tok_s", "throughput_req_s")
    ]
    out = E._judge(rows)
    assert [x["judged"] for x in out] == [True, True, False, False]
    assert out[2]["note"].startswith("fixed by construction") and out[0]["note"] == "n"
    rows = [{"metric": "throughput_output_tok_s", "note": "n"}]
    assert E._judge(rows, spread_solved=False)[0]["judged"] is True  # a burst's throughput is a prediction


@pytest.fixture(scope="module")
def llmperf_tables():
    from validation.measured import collect_path

    return collect_path(shared_path("measurements", "serving-llmperf"))


def test_rtx3090_bf16_replayed_with_the_reconstructed_client(llmperf_tables) -> None:
    m = llmperf_tables
    cells = m.table("cells")
    cell = cells[(cells["gpu"] == "rtx3090") & (cells["dtype"] == "bf16")].iloc[0]
    cfg = json.loads(cell["config_json"])
    assert set(cfg["distributions"]["end_to_end_latency_s"]["quantiles"]) == {"p25", "p50", "p75", "p90", "p95", "p99"}
    rows, extra = E.llmperf(cell, m.tables, PACKAGED)
    launch = extra["launch"]
    assert launch["threads"] == launch["requests"] == 64
    assert 0 < launch["spread_s"] < extra["measured_span_s"]  # staggered, not one burst
    assert launch["simulated_sent"] > 64  # threads re-send while fewer than 64 are recorded
    judged = {r["metric"]: r["judged"] for r in rows}
    for fam in ("ttft", "itl", "e2e"):
        for s in ("mean", "p50", "p90", "p95", "p99"):
            assert judged[f"{fam}_{s}_s"] is True
    assert judged["throughput_output_tok_s"] is False and judged["throughput_req_s"] is False
    assert extra["kv"]["implied_peak_in_flight"] == 64 and extra["kv"]["implied_peak_blocks"] > 1000
    assert extra["kv"]["simulator_blocks"] == extra["kv"]["default_blocks"]
    # Llama-3.1's 131,072-token default context needs 8,192 blocks: more than a 24 GB card's KV at 0.9
    assert extra["kv"]["default_max_model_len"] == 131072 and not extra["kv"]["default_max_model_len_starts"]
    assert "reconstructed LLMPerf client" in rows[0]["note"]


def test_sensitivity_frame_columns(llmperf_tables) -> None:
    m = llmperf_tables
    df = E.llmperf_sensitivity(
        m.tables,
        PACKAGED,
        (("rtx3090", "bf16"),),
        (("gpu_memory_utilization", (0.9, 0.95)), ("prefix_cache", ("off", "warm"))),
    )
    assert {
        "cell_id",
        "gpu",
        "dtype",
        "setting",
        "value",
        "metric",
        "measured",
        "simulated",
        "rel_error",
        "judged",
    } <= set(df.columns)
    one = df[df["metric"] == "e2e_mean_s"]
    assert set(zip(one["setting"], one["value"], strict=True)) == {
        ("gpu_memory_utilization", "0.9"),
        ("gpu_memory_utilization", "0.95"),
        ("prefix_cache", "off"),
        ("prefix_cache", "warm"),
    }
    base = one[(one["setting"] == "prefix_cache") & (one["value"] == "off")]["simulated"].to_numpy()
    warm = one[(one["setting"] == "prefix_cache") & (one["value"] == "warm")]["simulated"].to_numpy()
    assert np.all(warm < base)  # cached prompts: less prefill work in the same launch
