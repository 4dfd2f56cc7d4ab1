"""A small inference-perf campaign written from scratch: one native run folder, error tables, testdata and index."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

NATIVE = "20260101-000000-llama-3-1-8b-tp1-general"
GT = "5-llama-3-1-8b-tp1-general-1"  # the same run under its ground-truth name (joined by value)
TD = "7-qwen3-14b-tp1-codegen-1"  # known only to the error table, the testdata and the index
OVER = "9-llama-3-1-8b-tp1-reasoning-1"  # overloaded: TTFT longer than the decode span


def _dist(mean: float, p90: float, p99: float) -> dict[str, float]:
    return {"mean": mean, "median": mean, "p90": p90, "p99": p99, "min": mean / 2, "max": p99 * 1.1}


def lifecycle(ttft: float, e2e: float, out_len: float, *, failures: int = 0, rate: float = 2.0) -> dict:
    return {
        "load_summary": {"count": 10, "requested_rate": rate, "achieved_rate": rate},
        "successes": {
            "count": 10,
            "latency": {
                "time_to_first_token": _dist(ttft, ttft * 1.2, ttft * 1.5),
                "request_latency": _dist(e2e, e2e * 1.1, e2e * 1.2),
            },
            "prompt_len": {"mean": 560.0},
            "output_len": {"mean": out_len},
        },
        "failures": {"count": failures},
    }


def native_folder(root: Path, *, name: str = NATIVE, failures: int = 0) -> Path:
    d = root / "default_args" / name
    (d / "results").mkdir(parents=True)
    (d / "exp-config.yaml").write_text(
        yaml.safe_dump(
            {
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "tensor_parallelism": 1,
                "max_model_len": 4096,
                "max_num_batched_tokens": 2048,
                "max_num_seqs": 128,
                "app": "inference-perf",
            }
        )
    )
    resolved = {
        "api": {"type": "completion", "streaming": True},
        "data": {
            "type": "shared_prefix",
            "shared_prefix": {
                "num_groups": 2,
                "num_prompts_per_group": 3,
                "system_prompt_len": 100,
                "question_len": 447,
                "output_len": 248,
            },
        },
        "load": {"type": "constant", "stages": [{"rate": 2.0, "duration": 10}, {"rate": 4.0, "duration": 10}]},
        "server": {"type": "vllm", "model_name": "meta-llama/Llama-3.1-8B-Instruct", "ignore_eos": True},
    }
    (d / "results" / "config.yaml").write_text(yaml.safe_dump(resolved))
    (d / "profile.yaml").write_text(json.dumps(resolved))
    stages = [lifecycle(0.025, 1.9, 237.5, failures=failures), lifecycle(0.03, 2.3, 237.5, rate=4.0)]
    for i, st in enumerate(stages):
        (d / "results" / f"stage_{i}_lifecycle_metrics.json").write_text(json.dumps(st))
    (d / "results" / "summary_lifecycle_metrics.json").write_text(json.dumps(lifecycle(0.028, 2.1, 237.5)))
    return d


HEADER = (
    "simulator,experiment_folder,model,workload,stage_index,metric_name,predicted,actual,mape,mpe,absolute_error,"
    "exp_id,hardware,dp,cpu_offload,gpu_mem_util,precision,tp,max_num_batched_tokens"
)


def _row(sim: str, run: str, model: str, stage: int, metric: str, pred: float, actual: float, tp: int = 1) -> str:
    cols = [sim, f"/host/path/{run}", model, "general", stage, metric, pred, actual, 0, 0, 0, 1, "H100", ""]
    return ",".join(map(str, [*cols, False, 0.9, "FP16", tp, 2048]))


def error_tables(root: Path) -> tuple[Path, Path]:
    d = root / "tables" / "results_iter1"
    d.mkdir(parents=True)
    lines = [HEADER]
    # GT run: actual = the native lifecycle values (ms)
    for sim, scale in (("blis-trained-physics", 1.1), ("vidur", 0.8)):
        for stage, (ttft, e2e) in ((0, (25.0, 1900.0)), (1, (30.0, 2300.0))):
            lines.append(_row(sim, GT, "meta-llama/Llama-3.1-8B-Instruct", stage, "ttft_mean", ttft * scale, ttft))
            lines.append(_row(sim, GT, "meta-llama/Llama-3.1-8B-Instruct", stage, "e2e_mean", e2e * scale, e2e))
    lines.append(_row("vidur", TD, "Qwen/Qwen3-14B", 0, "ttft_mean", 40.0, 50.0))
    lines.append(_row("vidur", TD, "Qwen/Qwen3-14B", 0, "e2e_mean", 3000.0, 3200.0))
    lines.append(_row("vidur", TD, "Qwen/Qwen3-14B", 0, "itl_mean", 12.0, 12.8))
    lines.append(_row("vidur", OVER, "meta-llama/Llama-3.1-8B-Instruct", 0, "ttft_mean", 100.0, 90000.0))
    lines.append(_row("vidur", OVER, "meta-llama/Llama-3.1-8B-Instruct", 0, "e2e_mean", 100.0, 120000.0))
    main = d / "error_records.csv"
    main.write_text("\n".join(lines) + "\n")
    m = root / "tables" / "results"
    m.mkdir(parents=True)
    matched = m / "llmservingsim_error_records_matched.csv"
    matched.write_text(
        "\n".join(
            [HEADER, _row("llmservingsim", GT, "meta-llama/Llama-3.1-8B-Instruct", -1, "e2e_mean", 2000.0, 2100.0)]
        )
        + "\n"
    )
    return main, matched


def testdata(root: Path) -> Path:
    p = root / "testdata" / "trained_physics_iter1.json"
    p.parent.mkdir(parents=True)
    exp = {
        "id": "7",
        "model": "Qwen/Qwen3-14B",
        "hardware": "H100",
        "tp": 1,
        "max_num_seqs": 128,
        "max_num_batched_tokens": 2048,
        "total_kv_blocks": 5000,
        "cpu_kv_blocks": 100,
        "workload": {
            "inference_perf": {
                "shared_prefix": {
                    "num_unique_system_prompts": 11,
                    "num_users_per_system_prompt": 4,
                    "system_prompt_len": 100,
                    "question_len": 466,
                    "output_len": 247,
                },
                "stages": [{"rate": 5.0, "duration": 600}],
            }
        },
        "expected": {"e2e_mean_ms": 1.0},
    }
    p.write_text(json.dumps({"experiments": [exp]}))
    return p


def campaign(root: Path) -> Path:
    native_folder(root)
    error_tables(root)
    testdata(root)
    return root
