"""Measured vLLM runs read whole and replayed with the deployment they ran (validation.e2e.deployment): every field of
the real RTX 4090 meta.json, the older recorder schema without ``kv_cache`` (block count derived from the memory
model), a DP + EP run and an fp8 KV cache replayed with [hardware] dp / ep / kv_cache_dtype, and what is still not
modelled (e.g. pipeline parallelism) refused as "not simulated" naming file, field and value."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agentreplay.perf import kv_capacity_blocks, load_gpu, load_model
from collectors.measured.vllm_run import VllmRunCollector
from tests.conftest import ROOT, shared_path
from validation.e2e import cells as e2e
from validation.e2e.deployment import NotSimulated, from_config
from validation.e2e.deployment_sim import check, sim_config, unmodelled

RTX4090 = ("measurements", "serving-vllm-llmservingsim", "bench", "examples", "RTX4090")

#: The recorder's oldest meta.json (LLMServingSim bench/results/rtx4090-llama8b-tp1, vLLM 0.19): engine_kwargs only
OLD_META = {
    "schema_version": 1,
    "model": "meta-llama/Llama-3.1-8B",
    "vllm_version": "0.19.0",
    "engine_kwargs": {
        "model": "meta-llama/Llama-3.1-8B",
        "tensor_parallel_size": 1,
        "data_parallel_size": 1,
        "enable_expert_parallel": False,
        "max_num_seqs": 128,
        "max_num_batched_tokens": 2048,
        "max_model_len": 32768,
        "dtype": "bfloat16",
        "kv_cache_dtype": "auto",
        "seed": 42,
    },
    "dataset_path": "workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl",
    "num_requests": 24,
}
#: A MoE run on 2 GPUs with data + expert parallelism, shaped like LLMServingSim's
#: bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/vllm/meta.json (vLLM 0.28; trimmed)
DP_EP_META = {
    "schema_version": 1,
    "model": "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "vllm_version": "0.28.0",
    "engine_kwargs": {
        "model": "Qwen/Qwen3-30B-A3B-Instruct-2507",
        "tensor_parallel_size": 1,
        "data_parallel_size": 2,
        "enable_expert_parallel": True,
        "max_num_seqs": 128,
        "max_num_batched_tokens": 2048,
        "max_model_len": None,
        "dtype": "bfloat16",
        "kv_cache_dtype": "auto",
        "seed": 42,
        "load_format": "auto",
        "enforce_eager": False,
    },
    "dataset_path": "workloads/sharegpt-qwen3-30b-a3b-300-sps10.jsonl",
    "kv_cache": {
        "num_gpu_blocks": 75638,
        "block_size": 16,
        "gpu_memory_utilization": 0.92,
        "enable_prefix_caching": True,
        "num_kv_tokens": 1210208,
    },
    "hardware": {"device_count": 2, "device_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"},
    "resolved_config": {
        "parallel_config": {
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "data_parallel_size": 2,
            "enable_expert_parallel": True,
            "is_moe_model": True,
            "decode_context_parallel_size": 1,
        },
        "cache_config": {
            "block_size": 16,
            "cache_dtype": "auto",
            "gpu_memory_utilization": 0.92,
            "num_gpu_blocks": 75638,
            "enable_prefix_caching": True,
        },
        "scheduler_config": {
            "max_num_seqs": 128,
            "max_num_batched_tokens": 2048,
            "enable_chunked_prefill": True,
            "policy": "fcfs",
            "scheduler_reserve_full_isl": True,
            "long_prefill_token_threshold": 0,
        },
        "model_config": {
            "dtype": "torch.bfloat16",
            "quantization": None,
            "max_model_len": 262144,
            "enforce_eager": False,
        },
        "compilation_config": {"mode": 3, "cudagraph_mode": [2, 1]},
        "quant_config": None,
        "speculative_config": None,
    },
}


#: The same run with pipeline parallelism instead of DP + EP (not modelled)
PP_META = copy.deepcopy(DP_EP_META)
PP_META["engine_kwargs"].update(
    tensor_parallel_size=1, data_parallel_size=1, enable_expert_parallel=False, pipeline_parallel_size=2
)
PP_META["resolved_config"]["parallel_config"].update(
    data_parallel_size=1, enable_expert_parallel=False, pipeline_parallel_size=2
)


def requests(n: int = 24) -> list[dict]:
    """n small requests, 0.1 s apart; arrivals on the wall clock, engine stamps on a monotonic one (as vLLM)."""
    out = []
    for i in range(n):
        q = 27000.0 + 0.1 * i + 0.002
        first = q + 0.01 + 0.05
        n_out = 8 + (7 * i) % 40
        out.append(
            {
                "request_id": f"bench-{i}",
                "input_toks": 100 + (37 * i) % 500,
                "output_toks": n_out,
                "arrival_time": 1.7e9 + 0.1 * i,
                "queued_ts": q,
                "scheduled_ts": q + 0.01,
                "first_token_ts": first,
                "last_token_ts": first + 0.03 * (n_out - 1),
            }
        )
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
        "bfloat16",
        None,
        "auto",
        True,
    )
    assert dep.cudagraph_mode == "FULL_AND_PIECEWISE"  # recorded as the enum value [2, 1]
    assert dep.paths["cudagraph_mode"] == "resolved_config.compilation_config.cudagraph_mode"
    assert dep.paths["dp"] == "resolved_config.parallel_config.data_parallel_size"
    assert (dep.max_model_len, dep.enforce_eager, dep.reserve_full_isl) == (32768, False, True)
    assert dep.derived == {} and unmodelled(dep) == []
    cfg, note = sim_config(dep, "rtx4090", "llama-3.1-8b")
    assert note == "" and cfg.cache.num_gpu_blocks == 2588 and cfg.scheduler.max_num_seqs == 256


# --------------------------------------------------------------------------------------------- DP + EP


def test_dp_ep_run_replayed_with_dp_and_ep(runs):
    """DP 2 + EP of a MoE model: two lockstep ranks behind vLLM's balancer (agentreplay.features.dp.lockstep), the
    all-to-all backend vLLM's default (not recorded, so listed)."""
    _, _, _, tables = runs
    cell = cell_of(tables, "qwen3-30b-a3b")
    assert cell["n_gpus"] == 2 and cell["tp"] == 1 and "/tp1-dp2/" in cell["cell_id"]  # valid data: ingested
    dep = dep_of(cell)
    assert (dep.dp, dep.ep) == (2, True) and unmodelled(dep) == []
    assert dep.paths["dp"] == "resolved_config.parallel_config.data_parallel_size"
    cfg, note = sim_config(dep, cell["gpu"], cell["model"])
    hw = cfg.hardware
    assert (hw.tp, hw.dp, hw.ep, hw.all2all_backend) == (1, 2, True, "allgather_reducescatter")
    assert cfg.router.policy == "vllm-dp" and cfg.cache.num_gpu_blocks == 75638
    assert "all2all_backend=allgather_reducescatter" in note
    rows, dists, skipped = e2e.run_all(tables, agent=False)
    assert cell["cell_id"] not in dict(skipped) and cell["cell_id"] in set(rows["cell_id"])
    summary = dists[cell["cell_id"]]["summary"]
    assert summary["cluster"]["dp"] == 2 and summary["cluster"]["lockstep"] and summary["dp_group"]["steps"] > 0


def test_dp_ep_from_engine_kwargs_when_no_resolved_config():
    meta = {k: v for k, v in DP_EP_META.items() if k != "resolved_config"}
    dep = from_config(meta, "run/meta.json", "0.28.0")
    check(dep)  # modelled
    assert dep.paths["dp"] == "engine_kwargs.data_parallel_size"
    assert dep.paths["ep"] == "engine_kwargs.enable_expert_parallel"
    cfg, _ = sim_config(dep, "rtxpro6000", "qwen3-30b-a3b")
    assert (cfg.hardware.dp, cfg.hardware.ep) == (2, True)


def test_dp_layout_the_simulator_does_not_run_is_not_simulated():
    """DP + EP of a dense model: check_deployment's refusal, as NotSimulated naming the file and fields."""
    dep = from_config(DP_EP_META, "run/meta.json", "0.28.0")
    with pytest.raises(NotSimulated) as exc:
        sim_config(dep, "rtxpro6000", "llama-3.1-8b")
    msg = str(exc.value)
    assert msg.startswith("run/meta.json: ") and "needs a MoE model" in msg
    assert "resolved_config.parallel_config.enable_expert_parallel" in msg


def test_validate_lists_not_simulated_and_derived(runs, tmp_path):
    from validation.validate import run

    root, _, _, _ = runs
    pp = write_run(tmp_path / "runs" / "pp" / "vllm", PP_META)
    summary = run(tmp_path / "out", [str(root), str(tmp_path / "runs")], defaults=False, quick=True)
    skipped = {s["cell_id"]: s["reason"] for s in summary["skipped"]}
    pp_reason = next(r for c, r in skipped.items() if "/tp1-pp2/" in c)
    assert pp_reason.startswith("not simulated: ") and "pipeline_parallel_size = 2" in pp_reason
    assert str(pp / "meta.json") in pp_reason
    assert not any("llama-3.1-8b" in c for c in skipped)  # the old-schema run is simulated
    assert not any("/tp1-dp2/" in c for c in skipped)  # and the DP + EP run


def test_cli_not_simulated_only_folder_is_a_clear_error(tmp_path):
    """`agentreplay validate` on a folder whose only run the simulator does not model (pipeline parallelism): an
    error naming file, field and value, no traceback (run through the console script's entry point)."""
    import os
    import subprocess
    import sys

    pp = write_run(tmp_path / "runs" / "pp" / "vllm", PP_META)
    cmd = [
        sys.executable,
        "-c",
        "import sys; from agentreplay.cli import main; sys.argv[0] = 'agentreplay'; main()",
        "validate",
        "--measured",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "out"),
        "--no-default-sources",
        "--quick",
    ]
    res = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "400"},
    )
    out = res.stdout + res.stderr
    flat = "".join(out.split())  # rich may still wrap the message
    assert res.returncode != 0 and "Traceback" not in out, out
    assert "notsimulated:" in flat and "pipeline_parallel_size=2" in flat
    assert "".join(str(pp / "meta.json").split()) in flat


# --------------------------------------------------------------------------------------------- older meta.json


def test_old_meta_without_kv_cache_simulated_with_derived_blocks(runs):
    tables = runs[3]
    cell = cell_of(tables, "llama-3.1-8b")
    cfg_json = json.loads(cell["config_json"])
    assert cfg_json["meta_schema"].startswith("engine_kwargs only") and cfg_json["num_gpu_blocks"] is None
    dep = dep_of(cell)
    assert dep.num_gpu_blocks is None and dep.gpu_memory_utilization == 0.9  # vLLM 0.19's default
    assert {
        "num_gpu_blocks",
        "gpu_memory_utilization",
        "block_size",
        "pp",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "cudagraph_mode",
        "quantization",
    } <= set(dep.derived)
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


@pytest.mark.parametrize(
    ("blocks", "path", "value"),
    [
        (
            {"parallel_config": {"pipeline_parallel_size": 2}},
            "resolved_config.parallel_config.pipeline_parallel_size",
            "2",
        ),
        ({"model_config": {"quantization": "awq"}}, "resolved_config.model_config.quantization", "'awq'"),
        ({"model_config": {"dtype": "torch.float16"}}, "resolved_config.model_config.dtype", "'float16'"),
        ({"cache_config": {"cache_dtype": "fp8_inc"}}, "resolved_config.cache_config.cache_dtype", "'fp8_inc'"),
        (
            {"parallel_config": {"enable_expert_parallel": True}},
            "resolved_config.parallel_config.enable_expert_parallel",
            "True",
        ),
        (
            {"parallel_config": {"data_parallel_size": 2, "all2all_backend": "mori"}},
            "resolved_config.parallel_config.all2all_backend",
            "'mori'",
        ),
        (
            {"scheduler_config": {"enable_chunked_prefill": False}},
            "resolved_config.scheduler_config.enable_chunked_prefill",
            "False",
        ),
        ({"model_config": {"enforce_eager": True}}, "resolved_config.model_config.enforce_eager", "True"),
        ({"compilation_config": {"cudagraph_mode": 0}}, "resolved_config.compilation_config.cudagraph_mode", "'NONE'"),
        (
            {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}},
            "resolved_config.speculative_config",
            "'method'",
        ),
    ],
)
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


def test_fp8_kv_cache_is_simulated_with_an_fp8_kv_cache():
    dep = from_config(resolved(cache_config={"cache_dtype": "fp8_e4m3"}), "x/meta.json", "0.28.0")
    assert unmodelled(dep) == []
    cfg, _ = sim_config(dep, "rtxpro6000", "qwen3-30b-a3b")
    assert cfg.hardware.kv_cache_dtype == "fp8_e4m3" and cfg.cache.num_gpu_blocks == 75638
    # without a recorded block count the memory model sizes the cache in one byte per element: twice the blocks
    blocks = {}
    for kv in ("auto", "fp8"):
        meta = resolved(cache_config={"cache_dtype": kv, "num_gpu_blocks": None}) | {"kv_cache": {}}
        blocks[kv] = sim_config(from_config(meta, "x/meta.json", "0.28.0"), "rtxpro6000", "qwen3-30b-a3b")[0]
    assert blocks["auto"].hardware.kv_cache_dtype == "auto" and blocks["fp8"].hardware.kv_cache_dtype == "fp8"
    assert blocks["fp8"].cache.num_gpu_blocks >= 2 * blocks["auto"].cache.num_gpu_blocks


def test_block_size_simconfig_rejects_is_not_simulated():
    dep = from_config(resolved(cache_config={"block_size": 24}) | {"kv_cache": {}}, "x/meta.json", "0.28.0")
    with pytest.raises(NotSimulated, match="block_size"):
        sim_config(dep, "rtxpro6000", "qwen3-30b-a3b")
