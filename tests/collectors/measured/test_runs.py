"""Measured serving / agent run collectors: real data in ../shared (skipped without it) and broken inputs."""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pytest

from collectors.measured.agent_jct import AgentJctCollector
from collectors.measured.common import write_measured
from collectors.measured.llmperf import LLMPerfCollector
from collectors.measured.mlperf import MLPerfCollector
from collectors.measured.registry_runs import RUN_COLLECTORS
from collectors.measured.schema import METRIC_NAMES
from collectors.measured.vllm_run import VllmRunCollector
from tests.conftest import shared_path

VLLM_RUN = ("measurements", "serving-vllm-llmservingsim", "bench", "examples", "RTX4090", "Llama-3.1-8B", "vllm")
JCT_DIR = ("measurements", "agentic-jct-continuum-exp", "continuum_exp", "swebench_llama70B_vllm")


def metrics_of(result, cell_id=None) -> dict[str, float]:
    m = result.tables["metrics"]
    if cell_id is not None:
        m = m[m["cell_id"] == cell_id]
    return dict(zip(m["metric"], m["value"], strict=True))


def only_cell_metrics(result) -> dict[str, float]:
    assert len(result.tables["cells"]) == 1
    return metrics_of(result)


# ------------------------------------------------------------------------------------------ real data


def test_vllm_rtx4090_run(tmp_path):
    run = shared_path(*VLLM_RUN)
    result = VllmRunCollector().collect(run.parents[1])
    assert not result.skips
    req = result.tables["requests"]
    assert len(req) == 300
    cells = result.tables["cells"]
    c = cells.iloc[0]
    assert (c["gpu"], c["model"], c["dtype"], c["tp"], c["engine"], c["engine_version"]) == (
        "rtx4090",
        "llama-3.1-8b",
        "bf16",
        1,
        "vllm",
        "0.19.0",
    )
    assert c["workload"] == "sharegpt 300 req @ 10 req/s" and c["kind"] == "end-to-end"
    config = json.loads(c["config_json"])
    assert config["num_gpu_blocks"] == 2588 and config["block_size"] == 16 and config["max_num_seqs"] == 256
    # independent recomputation of the mean TTFT from the raw jsonl (engine clock aligned to the arrival clock)
    raw = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines() if line.strip()]
    arrival = np.array([r["arrival_time"] for r in raw])
    queued = np.array([r["queued_ts"] for r in raw])
    first = np.array([r["first_token_ts"] for r in raw])
    offset = np.min(queued - arrival)
    m = only_cell_metrics(result)
    assert m["ttft_mean_s"] == pytest.approx(np.mean(first - (arrival + offset)), rel=1e-9)
    # the source's own summary (queued_ts as arrival): TTFT mean 65456.6 ms, TPOT mean 32.4 ms, E2E 86578.3 ms
    assert m["ttft_mean_s"] == pytest.approx(65.4566, rel=1e-3)
    assert m["tpot_mean_s"] == pytest.approx(0.0324, rel=2e-3)
    assert m["e2e_mean_s"] == pytest.approx(86.5783, rel=1e-3)
    assert m["completed_requests"] == 300
    assert req["arrival_s"].min() == 0.0
    assert (req["queued_s"] >= req["arrival_s"]).all() and (req["last_token_s"] >= req["first_token_s"]).all()
    assert set(result.tables["metrics"]["metric"]) <= set(METRIC_NAMES)
    assert set(write_measured(tmp_path / "out", result)) == {"cells", "requests", "metrics"}


def test_llmperf_dbs():
    root = shared_path("measurements", "serving-llmperf")
    result = LLMPerfCollector().collect(root)
    assert not result.skips
    n_rows = 0
    for db in sorted(root.glob("*.db")):
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        n_rows += con.execute("select count(*) from benchmark_runs").fetchone()[0]
        con.close()
    cells = result.tables["cells"]
    assert len(cells) == n_rows == 39
    assert set(cells["dtype"]) == {"bf16", "fp8"}
    bf16_3090 = cells[(cells["gpu"] == "rtx3090") & (cells["dtype"] == "bf16")]
    assert len(bf16_3090) >= 2
    for cid in bf16_3090["cell_id"]:
        m = metrics_of(result, cid)
        assert 300 < m["throughput_output_tok_s"] < 2000
        assert 0 < m["ttft_mean_s"] < 1 and 0 < m["itl_mean_s"] < 0.2 < m["e2e_mean_s"] < 30  # seconds, not ms
        assert m["completed_requests"] == 64 and m["concurrency"] == 64
    assert set(result.tables["metrics"]["metric"]) <= set(METRIC_NAMES)


def test_agent_jct():
    d = shared_path(*JCT_DIR)
    result = AgentJctCollector().collect(d)
    assert not result.skips
    own = json.loads((d / "results.json").read_text())
    assert len(result.tables["programs"]) == 500
    m = only_cell_metrics(result)
    assert m["jct_mean_s"] == pytest.approx(own["average_duration"], rel=1e-6)
    assert m["jct_p50_s"] == pytest.approx(own["median_duration"], rel=1e-6)
    assert m["makespan_s"] == own["total_duration"] and m["num_programs"] == 500
    c = result.tables["cells"].iloc[0]
    assert (c["gpu"], c["n_gpus"], c["model"], c["tp"], c["load"]) == (
        "h100-sxm",
        4,
        "llama-3.1-70b",
        4,
        "64 in flight",
    )


def test_mlperf_both_scenarios():
    root = shared_path("measurements", "mlperf-inference")
    result = MLPerfCollector().collect(root)
    assert not result.skips
    cells = result.tables["cells"].set_index("cell_id")
    assert len(cells) == 2 and set(cells["workload"].str.split().str[-1]) == {"Server", "Offline"}
    assert (cells["gpu"] == "h100-sxm").all() and (cells["n_gpus"] == 8).all()
    assert (cells["model"] == "llama-2-70b").all() and (cells["engine"] == "tensorrt-llm").all()
    for cid in cells.index:
        assert metrics_of(result, cid)["throughput_output_tok_s"] > 0
    server = metrics_of(result, cells.index[cells["workload"].str.endswith("Server")][0])
    assert server["ttft_p99_s"] == pytest.approx(0.461278089) and server["target_qps"] == 75


def test_each_source_detected_by_exactly_one_collector():
    for parts in (VLLM_RUN, ("measurements", "serving-llmperf"), JCT_DIR, ("measurements", "mlperf-inference")):
        p = shared_path(*parts)
        assert sum(c.detect(p) for c in RUN_COLLECTORS) == 1, p


# ------------------------------------------------------------------------------------------ broken inputs


def write_run(d, requests=None, meta=None):
    d.mkdir(parents=True)
    meta = (
        meta
        if meta is not None
        else {
            "model": "meta-llama/Llama-3.1-8B",
            "vllm_version": "0.19.0",
            "engine_kwargs": {"tensor_parallel_size": 1, "dtype": "bfloat16", "max_num_seqs": 8},
            "kv_cache": {"num_gpu_blocks": 100, "block_size": 16},
            "hardware": {"device_name": "NVIDIA GeForce RTX 4090"},
            "dataset_path": "workloads/sharegpt-tiny-sps2.jsonl",
        }
    )
    # arrivals on the wall clock, engine stamps on a monotonic clock (as vLLM records them)
    requests = (
        requests
        if requests is not None
        else [
            {
                "request_id": "r0",
                "input_toks": 10,
                "output_toks": 11,
                "arrival_time": 1e9,
                "queued_ts": 100.0,
                "scheduled_ts": 100.0,
                "first_token_ts": 101.0,
                "last_token_ts": 102.0,
            },
            {
                "request_id": "r1",
                "input_toks": 20,
                "output_toks": 21,
                "arrival_time": 1e9 + 0.5,
                "queued_ts": 100.6,
                "scheduled_ts": 100.7,
                "first_token_ts": 101.5,
                "last_token_ts": 103.5,
            },
        ]
    )
    (d / "meta.json").write_text(json.dumps(meta))
    (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    return d


def test_vllm_metric_definitions(tmp_path):
    write_run(tmp_path / "run")
    result = VllmRunCollector().collect(tmp_path)
    m = only_cell_metrics(result)
    assert m["ttft_mean_s"] == pytest.approx(1.0)  # engine clock offset from min(queued - arrival) = r0's
    assert m["tpot_mean_s"] == pytest.approx(0.1)
    assert m["e2e_mean_s"] == pytest.approx(2.5)
    assert m["throughput_output_tok_s"] == pytest.approx(32 / 3.5)
    assert m["throughput_req_s"] == pytest.approx(2 / 3.5)
    req = result.tables["requests"].set_index("request_id")
    assert req.loc["r1", "arrival_s"] == pytest.approx(0.5) and req.loc["r1", "queued_s"] == pytest.approx(0.6)
    assert result.tables["cells"].iloc[0]["load"] == "2 req/s"


def test_vllm_truncated_requests_skipped_rest_ingested(tmp_path):
    write_run(tmp_path / "good")
    bad = write_run(tmp_path / "bad")
    text = (bad / "requests.jsonl").read_text()
    (bad / "requests.jsonl").write_text(text[: len(text) - 30])
    result = VllmRunCollector().collect(tmp_path)
    assert len(result.tables["cells"]) == 1 and len(result.tables["requests"]) == 2
    assert [s.path for s in result.skips] == [str(bad / "requests.jsonl")]
    assert "JSON" in result.skips[0].reason


def test_vllm_missing_meta_field(tmp_path):
    d = write_run(tmp_path / "run", meta={"vllm_version": "0.19.0", "engine_kwargs": {}})
    result = VllmRunCollector().collect(tmp_path)
    assert result.tables["cells"].empty
    assert result.skips[0].path == str(d / "meta.json") and "'model'" in result.skips[0].reason


def test_vllm_non_monotonic_timestamps(tmp_path):
    d = write_run(
        tmp_path / "run",
        requests=[
            {
                "request_id": "r0",
                "input_toks": 10,
                "output_toks": 11,
                "arrival_time": 1e9,
                "queued_ts": 100.0,
                "scheduled_ts": 100.0,
                "first_token_ts": 101.0,
                "last_token_ts": 100.5,
            }
        ],
    )
    result = VllmRunCollector().collect(tmp_path)
    assert result.skips[0].path == str(d / "requests.jsonl") and "non-monotonic" in result.skips[0].reason


def test_agent_results_without_job_durations(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text(json.dumps({"num_jobs": 2, "average_duration": 1.0}))
    (tmp_path / "neg").mkdir()
    (tmp_path / "neg" / "results.json").write_text(json.dumps({"job_durations": {"1": 5.0, "2": -1.0}}))
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "results.json").write_text(
        json.dumps(
            {
                "num_jobs": 2,
                "average_duration": 2.0,
                "median_duration": 2.0,
                "total_duration": 4.0,
                "job_durations": {"2": 3.0, "1": 1.0},
            }
        )
    )
    result = AgentJctCollector().collect(tmp_path)
    reasons = {s.path: s.reason for s in result.skips}
    assert "job_durations" in reasons[str(tmp_path / "bad" / "results.json")]
    assert "negative" in reasons[str(tmp_path / "neg" / "results.json")]
    assert list(result.tables["programs"]["program_id"]) == ["1", "2"]
    assert only_cell_metrics(result)["throughput_programs_s"] == pytest.approx(0.5)


def test_mlperf_summary_without_result_line(tmp_path):
    root = shared_path("measurements", "mlperf-inference")
    src = next(root.rglob("*Server__mlperf_log_summary.txt"))
    good = tmp_path / src.name
    shutil.copy(src, good)
    bad = tmp_path / src.name.replace("Server", "Broken")
    bad.write_text(
        "".join(line for line in src.read_text().splitlines(keepends=True) if "tokens per second" not in line.lower())
    )
    result = MLPerfCollector().collect(tmp_path)
    assert [s.path for s in result.skips] == [str(bad)] and "result line" in result.skips[0].reason
    assert len(result.tables["cells"]) == 1


def test_llmperf_unreadable_db_and_bad_row(tmp_path):
    (tmp_path / "junk.db").write_bytes(b"not a database at all")
    con = sqlite3.connect(tmp_path / "runs.db")
    con.execute(
        "create table benchmark_runs (id integer primary key, model text, gpu_info text, data_type text,"
        " num_concurrent_requests integer, raw_results text)"
    )
    dist = {"mean": 0.1, "min": 0.05, "quantiles": {f"p{q}": 0.1 for q in (50, 90, 95, 99)}}
    e2e = {"mean": 2.0, "min": 1.0, "quantiles": {f"p{q}": 2.0 for q in (50, 90, 95, 99)}}
    good = {
        "results": {
            "ttft_s": dist,
            "inter_token_latency_s": dist,
            "end_to_end_latency_s": e2e,
            "mean_output_throughput_token_per_s": 500.0,
            "num_completed_requests": 8,
            "num_completed_requests_per_min": 120.0,
            "number_output_tokens": {"mean": 100.0},
        }
    }
    con.execute(
        "insert into benchmark_runs values (1, 'unsloth/Meta-Llama-3.1-8B-Instruct', 'RTX 3090', 'BF16', 8, ?)",
        (json.dumps(good),),
    )
    con.execute("insert into benchmark_runs values (2, 'm', 'RTX 3090', 'BF16', 8, '{\"results\": {')")
    con.commit()
    con.close()
    result = LLMPerfCollector().collect(tmp_path)
    paths = sorted(s.path for s in result.skips)
    assert paths == [str(tmp_path / "junk.db"), f"{tmp_path / 'runs.db'}#id=2"]
    m = only_cell_metrics(result)
    assert m["throughput_req_s"] == pytest.approx(2.0) and m["output_tokens_mean"] == 100.0
