"""The deployment as vLLM runs it (agentreplay.perf.deploy): CUDA-graph capture sizes and padding, the KV-cache
dtype, the all-reduce vLLM picks per GPU / link / size, the fused MoE's padded rows and the fp8 linear kernel."""

from __future__ import annotations

import pytest

from agentreplay.perf import PerfModel, kv_capacity, load_gpu, load_model
from agentreplay.perf.deploy import (
    allreduce_kind,
    cudagraph_capture_sizes,
    custom_ar_link_bytes,
    default_cudagraph_sizes,
    fused_moe_block_m,
    kv_cache_dtype,
    linear_kernel,
    padded_tokens,
    padding_table,
)
from agentreplay.perf.table import pricer_from_names
from agentreplay.sim import SimConfig
from agentreplay.sim.config import ConfigError
from agentreplay.sim.run import plan_instance


def test_default_capture_sizes_follow_vllm() -> None:
    """VllmConfig._set_cudagraph_sizes: [1, 2, 4], multiples of 8 below 256, multiples of 16 up to
    min(2 * max_num_seqs, 512, max_num_batched_tokens), plus max_num_batched_tokens / max_num_seqs when they fit."""
    sizes = cudagraph_capture_sizes(256, 2048)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-3:] == (480, 496, 512)
    assert len(sizes) == 3 + 31 + 17 and 248 in sizes and 264 not in sizes
    assert cudagraph_capture_sizes(1024, 8192) == sizes
    assert cudagraph_capture_sizes(64, 2048)[-1] == 128  # 2 * max_num_seqs
    assert cudagraph_capture_sizes(256, 300)[-3:] == (272, 288, 300)  # max_num_batched_tokens appended
    assert cudagraph_capture_sizes(1024, 8192, data_center_blackwell=True)[-1] == 1024
    assert cudagraph_capture_sizes(256, 2048, max_capture_size=64)[-1] == 64
    assert default_cudagraph_sizes(load_gpu("b200"))[-1] == 1024
    assert default_cudagraph_sizes(load_gpu("h100-sxm")) == sizes
    with pytest.raises(ValueError, match="max_num_seqs"):
        cudagraph_capture_sizes(0, 2048)


def test_padding_goes_to_the_next_capture_size() -> None:
    table = padding_table(cudagraph_capture_sizes(256, 2048))
    assert [padded_tokens(table, n) for n in (0, 1, 3, 5, 9, 255, 300, 512, 513, 4000)] == [
        0,
        1,
        4,
        8,
        16,
        256,
        304,
        512,
        513,
        4000,
    ]
    assert padding_table(()) == [] and padded_tokens([], 3) == 3


def test_padded_batches_price_non_attention_kernels_at_the_capture_size() -> None:
    gpu, model = load_gpu("h100-sxm"), load_model("llama-3.1-8b")
    eager = PerfModel(gpu, model)
    graphs = PerfModel(gpu, model, cudagraph_sizes=cudagraph_capture_sizes(256, 2048))
    three, four = graphs.breakdown([], [100] * 3), eager.breakdown([], [100] * 4)
    for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "layernorm", "rotary_emb", "embedding"):
        assert three[op] == pytest.approx(four[op], rel=1e-12)
    # attention, LM head and sampler see the 3 real sequences
    for op in ("attention_decode", "lm_head", "sampler"):
        assert three[op] == pytest.approx(eager.breakdown([], [100] * 3)[op], rel=1e-12)
    # the exact decode form holds with padding
    a, c = graphs.decode_coeffs(3)
    assert graphs.decode_only_time_s(3, 300) == pytest.approx(a + c * 300, rel=1e-12)
    assert graphs.iteration_time_s([], [100] * 3) == graphs.decode_only_time_s(3, 300)
    # above the largest capture size nothing is padded
    assert graphs.prefill_time_s(600) == eager.prefill_time_s(600)
    assert graphs.prefill_time_s(300) > eager.prefill_time_s(300)


def test_kv_cache_dtype_feeds_capacity_and_decode_attention() -> None:
    assert kv_cache_dtype("auto") == "bf16" and kv_cache_dtype("fp8") == kv_cache_dtype("fp8_e5m2") == "fp8"
    with pytest.raises(ValueError, match="kv_cache_dtype='int8'"):
        kv_cache_dtype("int8")
    gpu, model = load_gpu("h100-sxm"), load_model("llama-3.1-8b")
    bf16, fp8 = kv_capacity(gpu, model), kv_capacity(gpu, model, kv_dtype="fp8")
    assert fp8.block_bytes * 2 == bf16.block_bytes and fp8.blocks in (2 * bf16.blocks, 2 * bf16.blocks + 1)
    a = pricer_from_names("roofline", "h100-sxm", "llama-3.1-8b").breakdown([], [4000] * 8)
    b = pricer_from_names("roofline", "h100-sxm", "llama-3.1-8b", kv_dtype="fp8").breakdown([], [4000] * 8)
    assert b["attention_decode"] < 0.6 * a["attention_decode"] and b["qkv_proj"] == a["qkv_proj"]


def test_kv_cache_dtype_config_reaches_the_plan() -> None:
    cfg = SimConfig()
    auto = plan_instance(cfg, "h100-sxm", 1, "bf16")
    fp8 = plan_instance(cfg.replace(hardware={"kv_cache_dtype": "fp8"}), "h100-sxm", 1, "bf16")
    assert fp8.num_gpu_blocks >= 2 * auto.num_gpu_blocks
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        cfg.replace(hardware={"kv_cache_dtype": "int8"})
    with pytest.raises(ConfigError, match="cudagraph_capture_sizes"):
        cfg.replace(hardware={"cudagraph_capture_sizes": [0, 8]})


def test_allreduce_kind_per_gpu_link_and_size() -> None:
    """CudaCommunicator.all_reduce: custom all-reduce needs P2P, 2 GPUs or full NVLink, and a message under its
    limit (8 MiB; CUSTOM_ALL_REDUCE_MAX_SIZES on 9.0 / 10.0); otherwise NCCL."""
    kib = 1024
    assert allreduce_kind(load_gpu("rtx4090"), 2, 64 * kib) == "nccl"  # GeForce: no P2P
    assert allreduce_kind(load_gpu("rtx3090"), 2, 64 * kib) == "nccl"
    assert allreduce_kind(load_gpu("a6000"), 2, 64 * kib) == "custom"  # PCIe P2P, 2 GPUs
    assert allreduce_kind(load_gpu("a6000"), 4, 64 * kib) == "nccl"  # PCIe, more than 2
    h100 = load_gpu("h100-sxm")
    assert allreduce_kind(h100, 8, 100 * kib) == "custom" and allreduce_kind(h100, 8, 300 * kib) == "nccl"
    # min(CUSTOM_ALL_REDUCE_MAX_SIZES (64 MiB on Hopper at TP=2), the 8 MiB buffer)
    assert allreduce_kind(h100, 2, 7 * 1024 * kib) == "custom" and allreduce_kind(h100, 2, 9 * 1024 * kib) == "nccl"
    assert allreduce_kind(load_gpu("a100-80gb"), 4, 9 * 1024 * kib) == "nccl"  # default 8 MiB
    assert allreduce_kind(load_gpu("b200"), 2, 3 * 1024 * kib) == "nccl"  # 2 MiB on 10.0
    assert allreduce_kind(h100, 16, kib) == "nccl" and allreduce_kind(h100, 1, kib) == "none"
    # one stage below the switch, two stages above; never cheaper for more bytes
    assert custom_ar_link_bytes(4, 100 * kib) == 3 * 100 * kib
    assert custom_ar_link_bytes(2, 1e6) == 1e6
    for gpu, tp in (("h100-sxm", 4), ("h100-sxm", 8), ("a100-80gb", 4), ("a6000", 2), ("rtx4090", 2)):
        pm = PerfModel(load_gpu(gpu), load_model("llama-3.1-70b"), tp=tp, custom_allreduce=True)
        times = [pm.tp_allreduce_time_s(b) for b in range(0, 40 * 1024 * kib, 64 * kib)]
        assert times == sorted(times), (gpu, tp)
    pm = PerfModel(h100, load_model("llama-3.1-70b"), tp=8, custom_allreduce=True)
    assert pm.tp_allreduce_time_s(16 * kib) < pm.allreduce_time_s(16 * kib)  # custom beats NCCL's latency
    assert pm.tp_allreduce_time_s(4e6) == pm.allreduce_time_s(4e6)


def test_fused_moe_rows_pad_each_touched_expert_to_whole_blocks() -> None:
    assert [fused_moe_block_m(m) for m in (1, 32, 33, 96, 97, 512, 513)] == [16, 16, 32, 32, 64, 64, 128]
    assert [fused_moe_block_m(m, True) for m in (64, 65)] == [16, 64]
    pm = PerfModel(load_gpu("h100-sxm"), load_model("qwen3-30b-a3b"))
    touched, rows = pm._moe_rows(1)
    assert touched == pytest.approx(8.0) and rows == pytest.approx(8 * 16)  # 8 experts, one 16-row block each
    touched, rows = pm._moe_rows(4096)
    assert touched == pytest.approx(128.0, rel=1e-6) and rows == pytest.approx(4096 * 8 + 128 * 127 / 2, rel=1e-6)
    # at one token the experts' GEMMs stream 8 experts' weights; compute is the padded rows
    small = pm.breakdown([], [10])
    assert small["gate_up_proj"] > 0


def test_fp8_linear_kernel_per_architecture() -> None:
    assert linear_kernel(load_gpu("rtx3090"), "fp8") == "fp8_marlin_w8a16"
    assert linear_kernel(load_gpu("a100-80gb"), "fp8") == "fp8_marlin_w8a16"
    assert linear_kernel(load_gpu("rtx4090"), "fp8") == "fp8_w8a8"
    assert linear_kernel(load_gpu("h100-sxm"), "fp8") == "fp8_w8a8"
    assert linear_kernel(load_gpu("h100-sxm"), "bf16") == "bf16"
    # Marlin: fp8 weight bytes at the bf16 tensor rate
    gpu, model = load_gpu("rtx3090"), load_model("llama-3.1-8b")
    bf, f8 = PerfModel(gpu, model), PerfModel(gpu, model, dtype="fp8")
    assert f8.breakdown([], [10])["gate_up_proj"] < 0.6 * bf.breakdown([], [10])["gate_up_proj"]  # weight-bound
    assert f8.prefill_time_s(2048) == pytest.approx(bf.prefill_time_s(2048), rel=0.05)  # compute-bound: no gain


def test_cudagraph_mode_and_disabled_custom_all_reduce() -> None:
    from agentreplay.perf.deploy import graph_padding

    assert graph_padding("FULL_AND_PIECEWISE") == (True, True) and graph_padding("PIECEWISE") == (True, True)
    assert graph_padding("FULL_DECODE_ONLY") == (True, False) and graph_padding("NONE") == (False, False)
    with pytest.raises(ValueError, match="cudagraph_mode='FULL_ONLY'"):
        graph_padding("FULL_ONLY")
    gpu, model = load_gpu("h100-sxm"), load_model("llama-3.1-8b")
    sizes = cudagraph_capture_sizes(256, 2048)
    eager = PerfModel(gpu, model)
    decode_only = PerfModel(gpu, model, cudagraph_sizes=sizes, graph_mixed=False)
    assert decode_only.iteration_time_s([(300, 0)], [50]) == eager.iteration_time_s([(300, 0)], [50])  # eager
    assert decode_only.decode_only_time_s(3, 30) > eager.decode_only_time_s(3, 30)  # padded to 4
    assert decode_only.padded_tokens(3) == 4 and decode_only.padded_tokens(3, decode_only=False) == 3
    nccl = PerfModel(gpu, load_model("llama-3.1-70b"), tp=4, custom_allreduce=False)
    assert not nccl.uses_custom_allreduce(1024) and nccl.tp_allreduce_time_s(1024) == nccl.allreduce_time_s(1024)
    assert allreduce_kind(gpu, 4, 1024, disable_custom_all_reduce=True) == "nccl"
    cfg = SimConfig()
    with pytest.raises(ConfigError, match="cudagraph_mode"):
        cfg.replace(hardware={"cudagraph_mode": "SOME"})
    assert cfg.replace(
        hardware={"deployment_kernels": True, "disable_custom_all_reduce": True}
    ).hardware.disable_custom_all_reduce
