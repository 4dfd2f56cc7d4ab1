"""Measured vLLM runs read whole and replayed with the deployment they ran (validation.deployment): every field of
the real RTX 4090 meta.json, the older recorder schema without ``kv_cache`` (block count derived from the memory
model), and a DP + EP run refused as "not simulated" naming file, field and value."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agentreplay.perf import kv_capacity_blocks, load_gpu, load_model
from collectors.measured.vllm_run import VllmRunCollector
from tests.conftest import shared_path
from validation import e2e
from validation.deployment import NotSimulated, check, from_config, sim_config, unmodelled

RTX4090 = ("measurements", "serving-vllm-llmservingsim", "bench", "examples", "RTX4090")

#: The recorder's oldest meta.json (LLMServingSim bench/results/rtx4090-llama8b-tp1, vLLM 0.19): engine_kwargs only
OLD_META = {
    "schema_version": 1, "model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0",
    "engine_kwargs": {"model": "meta-llama/Llama-3.1-8B", "tensor_parallel_size": 1, "data_parallel_size": 1,
                      "enable_expert_parallel": False, "max_num_seqs": 128, "max_num_batched_tokens": 2048,
                      "max_model_len": 32768, "dtype": "bfloat16", "kv_cache_dtype": "auto", "seed": 42},
    "dataset_path": "workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl", "num_requests": 24,
}
#: A MoE run on 2 GPUs with data + expert parallelism, shaped like LLMServingSim's
#: bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/vllm/meta.json (vLLM 0.28; trimmed)
DP_EP_META = {
    "schema_version": 1, "model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "vllm_version": "0.28.0",
    "engine_kwargs": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "tensor_parallel_size": 1,
                      "data_parallel_size": 2, "enable_expert_parallel": True, "max_num_seqs": 128,
                      "max_num_batched_tokens": 2048, "max_model_len": None, "dtype": "bfloat16",
                      "kv_cache_dtype": "auto", "seed": 42, "load_format": "auto", "enforce_eager": False},
    "dataset_path": "workloads/sharegpt-qwen3-30b-a3b-300-sps10.jsonl",
    "kv_cache": {"num_gpu_blocks": 75638, "block_size": 16, "gpu_memory_utilization": 0.92,
                 "enable_prefix_caching": True, "num_kv_tokens": 1210208},
    "hardware": {"device_count": 2, "device_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"},
    "resolved_config": {
        "parallel_config": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 2,
                            "enable_expert_parallel": True, "is_moe_model": True, "decode_context_parallel_size": 1},
        "cache_config": {"block_size": 16, "cache_dtype": "auto", "gpu_memory_utilization": 0.92,
                         "num_gpu_blocks": 75638, "enable_prefix_caching": True},
        "scheduler_config": {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "enable_chunked_prefill": True,
                             "policy": "fcfs", "scheduler_reserve_full_isl": True, "long_prefill_token_threshold": 0},
        "model_config": {"dtype": "torch.bfloat16", "quantization": None, "max_model_len": 262144,
                         "enforce_eager": False},
        "compilation_config": {"mode": 3, "cudagraph_mode": [2, 1]},
        "quant_config": None, "speculative_config": None},
}


def requests(n: int = 24) -> list[dict]:
    """n small requests, 0.1 s apart; arrivals on the wall clock, engine stamps on a monotonic one (as vLLM)."""
    out = []
    for i in range(n):
        q = 27000.0 + 0.1 * i + 0.002
        first = q + 0.01 + 0.05
        n_out = 8 + (7 * i) % 40
        out.append({"request_id": f"bench-{i}", "input_toks": 100 + (37 * i) % 500, "output_toks": n_out,
                    "arrival_time": 1.7e9 + 0.1 * i, "queued_ts": q, "scheduled_ts": q + 0.01,
                    "first_token_ts": first, "last_token_ts": first + 0.03 * (n_out - 1)})
    return out


def write_run(d: Path, meta: dict, n: int = 24, gpu_in_config: str | None = None) -> Path:
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps(meta))
    (d / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests(n)))
    if gpu_in_config:  # the oldest meta.json has no hardware block: the GPU comes from ../config.json
        (d.parent / "config.json").write_text(json.dumps({"nodes": [{"instances": [{"hardware": gpu_in_config}]}]}))
    return d


def cell_of(tables, model: str):
    cells = tables["cells"]
    return cells[cells["model"] == model].iloc[0]


def dep_of(cell):
    cfg = json.loads(cell["config_json"])
    return from_config(cfg, cfg["meta_file"], cell["engine_version"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("runs")
    old = write_run(root / "old" / "vllm", OLD_META, gpu_in_config="RTX4090")
    moe = write_run(root / "moe" / "vllm", DP_EP_META)
    result = VllmRunCollector().collect(root)
    assert not result.skips
    return root, old, moe, result.tables


# --------------------------------------------------------------------------------------------- the real run

def test_real_meta_every_field_read():
    run = shared_path(*RTX4090)
    tables = VllmRunCollector().collect(run).tables
    dep = dep_of(tables["cells"].iloc[0])
    assert (dep.tp, dep.pp, dep.dp, dep.ep) == (1, 1, 1, False)
    assert (dep.block_size, dep.num_gpu_blocks, dep.gpu_memory_utilization) == (16, 2588, 0.9)
    assert (dep.max_num_seqs, dep.max_num_batched_tokens, dep.enable_chunked_prefill) == (256, 2048, True)
    assert (dep.dtype, dep.quantization, dep.kv_cache_dtype, dep.enable_prefix_caching) == (
        "bfloat16", None, "auto", True)
    assert dep.cudagraph_mode == "FULL_AND_PIECEWISE"  # recorded as the enum value [2, 1]
    assert dep.paths["cudagraph_mode"] == "resolved_config.compilation_config.cudagraph_mode"
    assert dep.paths["dp"] == "resolved_config.parallel_config.data_parallel_size"
    assert (dep.max_model_len, dep.enforce_eager, dep.reserve_full_isl) == (32768, False, True)
    assert dep.derived == {} and unmodelled(dep) == []
    cfg, note = sim_config(dep, "rtx4090", "llama-3.1-8b")
    assert note == "" and cfg.cache.num_gpu_blocks == 2588 and cfg.scheduler.max_num_seqs == 256


# --------------------------------------------------------------------------------------------- DP + EP

def test_dp_ep_run_ingested_then_refused_at_simulation(runs):
    _, _, moe, tables = runs
    cell = cell_of(tables, "qwen3-30b-a3b")
    assert cell["n_gpus"] == 2 and cell["tp"] == 1 and "/tp1-dp2/" in cell["cell_id"]  # valid data: ingested
    rows, dists, skipped = e2e.run_all(tables, agent=False)
    reasons = dict(skipped)
    reason = reasons[cell["cell_id"]]
    assert reason.startswith("not simulated: ")
    assert str(moe / "meta.json") in reason
    assert "resolved_config.parallel_config.data_parallel_size = 2" in reason
    assert "resolved_config.parallel_config.enable_expert_parallel = True" in reason
    assert cell["cell_id"] not in set(rows["cell_id"]) and cell["cell_id"] not in dists


def test_dp_ep_from_engine_kwargs_when_no_resolved_config():
    meta = {k: v for k, v in DP_EP_META.items() if k != "resolved_config"}
    dep = from_config(meta, "run/meta.json", "0.28.0")
    with pytest.raises(NotSimulated) as exc:
        check(dep)
    msg = str(exc.value)
    assert msg.startswith("run/meta.json: ")
    assert "engine_kwargs.data_parallel_size = 2" in msg and "engine_kwargs.enable_expert_parallel = True" in msg


def test_validate_lists_not_simulated_and_derived(runs, tmp_path):
    from validation.validate import run

    root, _, moe, _ = runs
    summary = run(tmp_path / "out", [str(root)], defaults=False, quick=True)
    skipped = {s["cell_id"]: s["reason"] for s in summary["skipped"]}
    moe_reason = next(r for c, r in skipped.items() if "qwen3-30b-a3b" in c)
    assert moe_reason.startswith("not simulated: ") and "data_parallel_size = 2" in moe_reason
    assert str(moe / "meta.json") in moe_reason
    assert not any("llama-3.1-8b" in c for c in skipped)  # the old-schema run is simulated


def test_cli_dp_ep_only_folder_is_a_clear_error(tmp_path):
    """`agentreplay validate` on a folder whose only run is DP + EP: an error naming file, field and value, no
    traceback (run through the console script's entry point)."""
    import os
    import subprocess
    import sys

    moe = write_run(tmp_path / "runs" / "moe" / "vllm", DP_EP_META)
    cmd = [sys.executable, "-c", "import sys; from agentreplay.cli import main; sys.argv[0] = 'agentreplay'; main()",
           "validate", "--measured", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--no-default-sources",
           "--quick"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
                         env={**os.environ, "COLUMNS": "400"})
    out = res.stdout + res.stderr
    flat = "".join(out.split())  # rich may still wrap the message
    assert res.returncode != 0 and "Traceback" not in out, out
    assert "notsimulated:" in flat and "data_parallel_size=2" in flat and "enable_expert_parallel=True" in flat
    assert "".join(str(moe / "meta.json").split()) in flat


# --------------------------------------------------------------------------------------------- older meta.json

def test_old_meta_without_kv_cache_simulated_with_derived_blocks(runs):
    tables = runs[3]
    cell = cell_of(tables, "llama-3.1-8b")
    cfg_json = json.loads(cell["config_json"])
    assert cfg_json["meta_schema"].startswith("engine_kwargs only") and cfg_json["num_gpu_blocks"] is None
    dep = dep_of(cell)
    assert dep.num_gpu_blocks is None and dep.gpu_memory_utilization == 0.9  # vLLM 0.19's default
    assert {"num_gpu_blocks", "gpu_memory_utilization", "block_size", "pp", "enable_prefix_caching",
            "enable_chunked_prefill", "cudagraph_mode", "quantization"} <= set(dep.derived)
    expected = kv_capacity_blocks(load_gpu("rtx4090"), load_model("llama-3.1-8b"), "bf16", 1, 0.9, 16)
    rows, dists, _ = e2e.run_all(tables, agent=False)
    assert dists[cell["cell_id"]]["kv_blocks"] == expected
    note = rows.loc[rows["cell_id"] == cell["cell_id"], "note"].iloc[0]
    assert f"KV blocks derived: {expected} from the memory model (utilisation 0.9)" in note
    assert "vLLM defaults for unrecorded" in note and "block_size=16" in note
    assert set(rows.loc[rows["cell_id"] == cell["cell_id"], "metric"]) >= {"ttft_mean_s", "tpot_mean_s"}


def test_empty_blocks_as_collection_failed():
    """The recorder writes {} for kv_cache / resolved_config when it could not read them: same as absent."""
    meta = {**OLD_META, "kv_cache": {}, "resolved_config": {}, "vllm_version": "0.28.0"}
    dep = from_config(meta, "m.json", "0.28.0")
    assert dep.num_gpu_blocks is None and dep.gpu_memory_utilization == 0.92  # vLLM 0.28 / 0.32 default
    assert "0.92" in dep.derived["gpu_memory_utilization"]


# --------------------------------------------------------------------------------------------- each refusal

def resolved(**blocks) -> dict:
    meta = copy.deepcopy(DP_EP_META)
    meta["engine_kwargs"].update(data_parallel_size=1, enable_expert_parallel=False)
    meta["resolved_config"]["parallel_config"].update(data_parallel_size=1, enable_expert_parallel=False)
    for block, changes in blocks.items():
        if isinstance(changes, dict) and isinstance(meta["resolved_config"].get(block), dict):
            meta["resolved_config"][block].update(changes)
        else:
            meta["resolved_config"][block] = changes
    return meta


@pytest.mark.parametrize(("blocks", "path", "value"), [
    ({"parallel_config": {"pipeline_parallel_size": 2}}, "resolved_config.parallel_config.pipeline_parallel_size",
     "2"),
    ({"model_config": {"quantization": "awq"}}, "resolved_config.model_config.quantization", "'awq'"),
    ({"model_config": {"dtype": "torch.float16"}}, "resolved_config.model_config.dtype", "'float16'"),
    ({"cache_config": {"cache_dtype": "fp8_e4m3"}}, "resolved_config.cache_config.cache_dtype", "'fp8_e4m3'"),
    ({"scheduler_config": {"enable_chunked_prefill": False}},
     "resolved_config.scheduler_config.enable_chunked_prefill", "False"),
    ({"model_config": {"enforce_eager": True}}, "resolved_config.model_config.enforce_eager", "True"),
    ({"compilation_config": {"cudagraph_mode": 0}}, "resolved_config.compilation_config.cudagraph_mode", "'NONE'"),
    ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}, "resolved_config.speculative_config",
     "'method'"),
])
def test_unmodelled_field_named(blocks, path, value):
    dep = from_config(resolved(**blocks), "x/meta.json", "0.28.0")
    with pytest.raises(NotSimulated) as exc:
        sim_config(dep, "rtxpro6000", "qwen3-30b-a3b")
    msg = str(exc.value)
    assert msg.startswith("x/meta.json: ") and f"{path} = " in msg and value in msg


def test_fp8_quantization_is_simulated_as_fp8():
    dep = from_config(resolved(model_config={"quantization": "fp8"}), "x/meta.json", "0.28.0")
    cfg, _ = sim_config(dep, "rtxpro6000", "qwen3-30b-a3b")
    assert cfg.hardware.dtype == "fp8" and cfg.cache.num_gpu_blocks == 75638


def test_block_size_simconfig_rejects_is_not_simulated():
    dep = from_config(resolved(cache_config={"block_size": 24}) | {"kv_cache": {}}, "x/meta.json", "0.28.0")
    with pytest.raises(NotSimulated, match="block_size"):
        sim_config(dep, "rtxpro6000", "qwen3-30b-a3b")
