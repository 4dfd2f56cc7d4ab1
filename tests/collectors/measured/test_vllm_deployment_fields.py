"""The vLLM-run collector keeps every deployment field a replay needs, across the recorder's meta.json variants,
and ingests runs the simulator cannot replay (DP / EP): they are valid data, refused only at simulation."""

from __future__ import annotations

import copy
import json

import pytest

from collectors.measured.vllm_run import VllmRunCollector
from tests.conftest import shared_path
from tests.validation.e2e.test_deployment import DP_EP_META, OLD_META, write_run


def only_cell(tmp_path, meta, **kw):
    write_run(tmp_path / "r" / "vllm", meta, **kw)
    result = VllmRunCollector().collect(tmp_path)
    assert not result.skips, result.skips
    assert len(result.tables["cells"]) == 1
    c = result.tables["cells"].iloc[0]
    return c, json.loads(c["config_json"])


def test_dp_ep_run_kept_whole(tmp_path):
    c, cfg = only_cell(tmp_path, DP_EP_META)
    assert (c["gpu"], c["model"], c["tp"], c["n_gpus"], c["dtype"]) == ("rtxpro6000", "qwen3-30b-a3b", 1, 2, "bf16")
    assert c["cell_id"] == "vllm-run/rtxpro6000/qwen3-30b-a3b/tp1-dp2/10rps"
    par = cfg["resolved_config"]["parallel_config"]
    assert par["data_parallel_size"] == 2 and par["enable_expert_parallel"] is True
    assert cfg["engine_kwargs"]["data_parallel_size"] == 2 and cfg["engine_kwargs"]["enable_expert_parallel"] is True
    assert cfg["resolved_config"]["compilation_config"]["cudagraph_mode"] == [2, 1]
    assert cfg["resolved_config"]["speculative_config"] is None  # a recorded "none" stays recorded
    assert cfg["meta_file"] == str(tmp_path / "r" / "vllm" / "meta.json")
    assert cfg["meta_schema"] == "kv_cache + resolved_config"


def test_old_schema_engine_kwargs_only(tmp_path):
    c, cfg = only_cell(tmp_path, OLD_META, gpu_in_config="RTX4090")
    assert (c["gpu"], c["tp"], c["n_gpus"], c["dtype"]) == ("rtx4090", 1, 1, "bf16")
    assert cfg["meta_schema"].startswith("engine_kwargs only") and cfg["resolved_config"] == {}
    assert cfg["num_gpu_blocks"] is None and cfg["max_num_seqs"] == 128
    notes = VllmRunCollector().collect(tmp_path).notes
    assert any("records no kv_cache.num_gpu_blocks" in n and "memory model" in n for n in notes)


def test_fp8_quantization_labels_the_cell_fp8(tmp_path):
    meta = copy.deepcopy(DP_EP_META)
    meta["resolved_config"]["model_config"]["quantization"] = "fp8"
    meta["resolved_config"]["quant_config"] = {"activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    c, cfg = only_cell(tmp_path, meta)
    assert c["dtype"] == "fp8" and cfg["resolved_config"]["quant_config"]["weight_block_size"] == [128, 128]


@pytest.mark.parametrize(
    "broken",
    [
        {"kv_cache": None, "resolved_config": "<VllmConfig>"},
        {"kv_cache": [], "resolved_config": {"parallel_config": "<ParallelConfig>"}},
    ],
)
def test_blocks_not_objects_are_read_as_absent(tmp_path, broken):
    """The recorder tags values it cannot serialise ("<type>"): such a block is absent, not a crash."""
    meta = {**copy.deepcopy(DP_EP_META), **broken}
    c, cfg = only_cell(tmp_path, meta)
    assert cfg["kv_cache"] == {} and c["n_gpus"] == 2  # DP still read from engine_kwargs


def test_real_run_keeps_resolved_blocks():
    run = shared_path("measurements", "serving-vllm-llmservingsim", "bench", "examples", "RTX4090")
    c = VllmRunCollector().collect(run).tables["cells"].iloc[0]
    cfg = json.loads(c["config_json"])
    res = cfg["resolved_config"]
    assert set(res) >= {
        "parallel_config",
        "cache_config",
        "scheduler_config",
        "model_config",
        "compilation_config",
        "quant_config",
        "speculative_config",
    }
    assert res["parallel_config"]["pipeline_parallel_size"] == 1 and res["model_config"]["quantization"] is None
    assert c["cell_id"] == "vllm-run/rtx4090/llama-3.1-8b/tp1/10rps" and c["n_gpus"] == 1
