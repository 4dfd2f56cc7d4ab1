"""The iteration pricer: hand-computed cases, monotonicity, TP / fp8 effects, closed-form decode runs, KV capacity."""

from __future__ import annotations

import dataclasses
import itertools
import timeit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.perf import (
    DEFAULT_ACTIVATION_RESERVE_GIB,
    OPERATORS,
    Efficiency,
    GpuSpec,
    IterationPricer,
    PerfModel,
    kv_capacity,
    kv_capacity_blocks,
    load_gpu,
    load_model,
)

IDEAL = Efficiency(
    compute_efficiency=1.0,
    bandwidth_efficiency=1.0,
    attn_prefill_efficiency=1.0,
    attn_decode_efficiency=1.0,
    allreduce_efficiency=1.0,
    allreduce_latency_us=0.0,
    kernel_overhead_us=0.0,
    framework_overhead_ms=0.0,
)


def unit_gpu(tflops: float, gbps: float) -> GpuSpec:
    """A GPU with round peaks and ideal efficiencies, so costs can be worked out by hand."""
    return GpuSpec(
        name="unit",
        display_name="unit",
        architecture="hopper",
        memory_gib=1.0,
        usable_memory_gib=1.0,
        mem_bandwidth_gbps=gbps,
        bf16_tflops=tflops,
        fp8_tflops=0.0,
        interconnect="nvlink",
        interconnect_bw_gbps=1.0,
        efficiency=IDEAL,
    )


def test_memory_bound_decode_by_hand() -> None:
    """Toy model (h=64, 2 layers, 4 heads x 16, 2 kv heads, mlp 128, vocab 256), one decode at ctx 10, on a GPU
    with unlimited FLOP/s and 1 GB/s: every operator is bytes / 1e9."""
    pm = PerfModel(unit_gpu(tflops=1e9, gbps=1.0), load_model("toy"))
    per_layer = (
        2 * 4 * 64 * 2  # two fused add+RMSNorm: read x, residual, write both (bf16)
        + 64 * 128 * 2
        + (64 + 128) * 2  # qkv weights (64 -> 64 + 2*32) + activations in/out
        + 2 * (64 + 32) * 2  # rotary: read and write q and k
        + (10 + 1) * 128
        + 128
        + 2 * 64 * 2  # attention: read 11 keys x 128 B of K+V, write own K+V, q in, o out
        + 64 * 64 * 2
        + (64 + 64) * 2  # o_proj
        + 64 * 256 * 2
        + (64 + 256) * 2  # gate_up
        + 3 * 128 * 2  # SiLU-and-mul
        + 128 * 64 * 2
        + (128 + 64) * 2  # down
    )
    assert per_layer == 79_360
    once = 2 * 64 * 2 + 4 * 64 * 2 + 64 * 256 * 2 + (64 + 256) * 2 + 2 * 256 * 4  # embed, norm, lm_head, sampler
    assert pm.iteration_time_s([], [10]) == pytest.approx((2 * per_layer + once) / 1e9, rel=1e-12)
    assert pm.iteration_time_s([], [10]) == pytest.approx(194_944e-9, rel=1e-12)


def test_compute_bound_prefill_by_hand() -> None:
    """Toy model, one 100-token prefill on a GPU with 1 TFLOP/s and unlimited bandwidth: FLOPs / 1e12."""
    pm = PerfModel(unit_gpu(tflops=1.0, gbps=1e9), load_model("toy"))
    t = 100
    per_layer = (
        2 * t * 64 * 128  # qkv
        + 4 * t * (0 + t / 2) * 64  # causal attention: QK^T and PV over half the square
        + 2 * t * 64 * 64  # o
        + 2 * t * 64 * 256  # gate_up
        + 2 * t * 128 * 64  # down
    )
    flops = 2 * per_layer + 2 * 1 * 64 * 256  # + LM head for the one emitted token
    assert flops == 17_338_368
    assert pm.prefill_time_s(t) == pytest.approx(flops / 1e12, rel=1e-6)


@pytest.fixture(scope="module")
def h100_8b() -> PerfModel:
    return PerfModel.from_names("h100-sxm", "llama-3.1-8b")


def test_is_an_iteration_pricer(h100_8b: PerfModel) -> None:
    assert isinstance(h100_8b, IterationPricer)
    assert h100_8b.iteration_time_s([], []) == 0.0


MODELS = [
    ("h100-sxm", "llama-3.1-8b", "bf16", 1),
    ("a100-80gb", "llama-3.1-70b", "fp8", 4),
    ("rtxpro6000", "qwen3-30b-a3b", "bf16", 2),
    ("rtx3090", "toy", "bf16", 1),
]


@pytest.mark.parametrize(("gpu", "model", "dtype", "tp"), MODELS)
@settings(max_examples=60, deadline=None)
@given(
    chunk=st.integers(1, 8192),
    prefix=st.integers(0, 100_000),
    extra=st.integers(1, 4096),
    ctxs=st.lists(st.integers(0, 50_000), max_size=40),
    more_ctx=st.integers(1, 10_000),
)
def test_more_work_is_never_cheaper(gpu, model, dtype, tp, chunk, prefix, extra, ctxs, more_ctx) -> None:
    pm = PerfModel.from_names(gpu, model, dtype, tp)
    base = pm.iteration_time_s([(chunk, prefix)], ctxs)
    assert pm.iteration_time_s([(chunk + extra, prefix)], ctxs) >= base  # more prefill tokens
    assert pm.iteration_time_s([(chunk, prefix + extra)], ctxs) >= base  # longer cached prefix
    assert pm.iteration_time_s([(chunk, prefix)], [*ctxs, more_ctx]) >= base  # one more decode
    if ctxs:
        longer = [ctxs[0] + more_ctx, *ctxs[1:]]
        assert pm.iteration_time_s([(chunk, prefix)], longer) >= base  # longer decode context
    assert pm.iteration_time_s([(chunk, prefix, False)], ctxs) <= base  # a non-final chunk skips the LM head
    assert pm.iteration_time_s([(chunk, prefix), (extra, 0)], ctxs) >= base  # one more prefill


def test_monotone_sweeps(h100_8b: PerfModel) -> None:
    prefill = [h100_8b.prefill_time_s(t) for t in range(1, 8193, 7)]
    assert all(a <= b for a, b in itertools.pairwise(prefill))
    decode_b = [h100_8b.decode_step_time_s(b, 1024) for b in range(1, 513)]
    assert all(a <= b for a, b in itertools.pairwise(decode_b))
    decode_c = [h100_8b.decode_step_time_s(8, c) for c in range(0, 131_072, 997)]
    assert all(a < b for a, b in itertools.pairwise(decode_c))


def test_tensor_parallel_splits_compute() -> None:
    tp1 = PerfModel.from_names("h100-sxm", "llama-3.1-8b", tp=1)
    tp2 = PerfModel.from_names("h100-sxm", "llama-3.1-8b", tp=2)
    b1, b2 = tp1.breakdown([(4096, 0)], []), tp2.breakdown([(4096, 0)], [])
    for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention_prefill"):
        assert b2[op] == pytest.approx(b1[op] / 2, rel=1e-9), op  # compute-bound: exactly half
    assert b1["tp_comm"] == 0 < b2["tp_comm"]
    assert tp2.prefill_time_s(4096) < tp1.prefill_time_s(4096)
    assert tp2.decode_step_time_s(32, 2048) < tp1.decode_step_time_s(32, 2048)


def test_fp8_is_faster_where_supported() -> None:
    for dtype_gpu in ("h100-sxm", "rtx4090", "b200"):
        bf16 = PerfModel.from_names(dtype_gpu, "llama-3.1-8b", "bf16")
        fp8 = PerfModel.from_names(dtype_gpu, "llama-3.1-8b", "fp8")
        assert fp8.prefill_time_s(4096) < bf16.prefill_time_s(4096), dtype_gpu
        assert fp8.decode_step_time_s(16, 1024) < bf16.decode_step_time_s(16, 1024), dtype_gpu
    # Ampere: weight-only fp8 halves weight bytes (decode) but compute stays at the bf16 rate (prefill GEMMs).
    bf16 = PerfModel.from_names("a100-80gb", "llama-3.1-8b", "bf16")
    fp8 = PerfModel.from_names("a100-80gb", "llama-3.1-8b", "fp8")
    assert fp8.decode_step_time_s(1, 1024) < bf16.decode_step_time_s(1, 1024)
    assert fp8.breakdown([(4096, 0)], [])["gate_up_proj"] == bf16.breakdown([(4096, 0)], [])["gate_up_proj"]


def test_moe_reads_only_touched_experts() -> None:
    gpu, model = load_gpu("h100-sxm"), load_model("qwen3-30b-a3b")
    pm = PerfModel(gpu, model)
    bw = gpu.mem_bandwidth_gbps * 1e9 * gpu.efficiency.bandwidth_efficiency
    one_expert_gate_up = 2048 * 2 * 768 * 2 / bw  # weight bytes of one expert's gate+up / bandwidth
    act = 8 * (2048 + 2 * 768) * 2 / bw  # the token goes through 8 experts
    got = pm.breakdown([], [100])["gate_up_proj"]
    assert got == pytest.approx(48 * (8 * one_expert_gate_up + act), rel=1e-12)
    # A big batch touches every expert: weight reads saturate at all 128.
    big = pm.breakdown([], [100] * 2048)["gate_up_proj"]
    assert 48 * 128 * one_expert_gate_up * 0.99 < big
    dense = PerfModel(gpu, load_model("qwen3-32b"))
    assert pm.decode_step_time_s(1, 1024) < dense.decode_step_time_s(1, 1024) / 3


def test_breakdown_sums_to_iteration(h100_8b: PerfModel) -> None:
    pf, dec = [(512, 3000), (100, 0, False)], [10, 2000, 40_000]
    parts = h100_8b.breakdown(pf, dec)
    assert tuple(parts) == OPERATORS
    assert sum(parts.values()) == pytest.approx(h100_8b.iteration_time_s(pf, dec), rel=1e-12)
    assert parts["attention_prefill"] > 0 and parts["attention_decode"] > 0 and parts["moe_router"] == 0


@pytest.mark.parametrize(("gpu", "model", "dtype", "tp"), MODELS)
def test_decode_depends_on_context_sum_only(gpu, model, dtype, tp) -> None:
    pm = PerfModel.from_names(gpu, model, dtype, tp)
    ctxs = [5, 700, 12_000, 3]
    assert pm.iteration_time_s([], ctxs) == pm.decode_only_time_s(4, sum(ctxs))  # bit for bit
    assert pm.iteration_time_s([], [3177] * 4) == pm.decode_only_time_s(4, 12_708)


@pytest.mark.parametrize(("gpu", "model", "dtype", "tp"), MODELS)
@pytest.mark.parametrize(("n", "s", "k"), [(1, 0, 1), (1, 1000, 250), (64, 64 * 900, 77), (256, 10**7, 1000)])
def test_decode_steps_equal_the_loop(gpu, model, dtype, tp, n, s, k) -> None:
    pm = PerfModel.from_names(gpu, model, dtype, tp)
    loop = sum(pm.decode_only_time_s(n, s + i * n) for i in range(k))
    assert pm.decode_steps_time_s(n, s, k) == pytest.approx(loop, rel=1e-9)
    assert pm.decode_steps_time_s(n, s, 0) == 0.0


@pytest.mark.parametrize("horizon_s", [0.0, 1e-4, 0.05, 1.0, 37.5])
def test_decode_steps_within_is_the_largest_fitting_k(h100_8b: PerfModel, horizon_s: float) -> None:
    k = h100_8b.decode_steps_within(32, 32 * 4000, horizon_s)
    assert h100_8b.decode_steps_time_s(32, 32 * 4000, k) <= horizon_s
    assert h100_8b.decode_steps_time_s(32, 32 * 4000, k + 1) > horizon_s


def test_invalid_configs_fail_with_the_value() -> None:
    with pytest.raises(ValueError, match=r"llama-3\.1-8b: tp=3 does not divide num_attention_heads=32"):
        PerfModel.from_names("h100-sxm", "llama-3.1-8b", tp=3)
    with pytest.raises(ValueError, match=r"dtype='fp16' is not supported; allowed: \['bf16', 'fp8'\]"):
        PerfModel.from_names("h100-sxm", "llama-3.1-8b", dtype="fp16")  # type: ignore[arg-type]
    pm = PerfModel.from_names("h100-sxm", "llama-3.1-8b")
    with pytest.raises(ValueError, match="chunk_tokens >= 1"):
        pm.iteration_time_s([(0, 10)], [])
    with pytest.raises(ValueError, match="k=-1"):
        pm.decode_steps_time_s(1, 10, -1)


def test_efficiency_override_changes_price(h100_8b: PerfModel) -> None:
    slow = dataclasses.replace(h100_8b.efficiency, compute_efficiency=h100_8b.efficiency.compute_efficiency / 2)
    pm = PerfModel(h100_8b.gpu, h100_8b.model, efficiency=slow)
    assert pm.prefill_time_s(4096) > 1.5 * h100_8b.prefill_time_s(4096)
    assert pm.decode_step_time_s(1, 100) == h100_8b.decode_step_time_s(1, 100)  # memory-bound: unchanged


# ---- KV capacity ------------------------------------------------------------------------------------------
def test_kv_capacity_llama8b_h100_is_plausible() -> None:
    cap = kv_capacity(load_gpu("h100-sxm"), load_model("llama-3.1-8b"))
    kv_gib = cap.kv_bytes / 2**30
    print(f"\nllama-3.1-8b on h100-sxm bf16, util 0.9: {cap.blocks} blocks of 16 tokens = {kv_gib:.2f} GiB KV")
    assert 0.85 * 60 <= kv_gib <= 1.15 * 60  # vLLM reports ~58-62 GiB (51.4 GiB with larger batch budgets)
    assert cap.blocks == kv_capacity_blocks(load_gpu("h100-sxm"), load_model("llama-3.1-8b"))


def test_kv_capacity_reproduces_the_measured_rtx4090_run() -> None:
    """The cell the default activation reserve was derived from (vLLM 0.19, meta.json: 2588 blocks): a
    consistency check of the formula, not a validation."""
    assert kv_capacity_blocks(load_gpu("rtx4090"), load_model("llama-3.1-8b")) == 2588


def test_kv_capacity_scales_and_fails_with_numbers() -> None:
    h100, m70 = load_gpu("h100-sxm"), load_model("llama-3.1-70b")
    tp4 = kv_capacity_blocks(h100, m70, tp=4)
    tp8 = kv_capacity_blocks(h100, m70, tp=8)
    assert tp8 > tp4 > 0
    assert kv_capacity_blocks(h100, m70, "fp8", tp=2) > kv_capacity_blocks(h100, m70, "bf16", tp=2)
    with pytest.raises(ValueError, match=r"llama-3\.1-70b \(bf16, tp=1\) on h100-sxm: weights 131\.42 GiB/rank"):
        kv_capacity_blocks(h100, m70)
    m8 = load_model("llama-3.1-8b")
    just_over = (m8.weight_bytes() + DEFAULT_ACTIVATION_RESERVE_GIB * 2**30 + 2**20) / (h100.usable_memory_gib * 2**30)
    with pytest.raises(ValueError, match=r"less than one block of 2\.00 MiB"):  # 1 MiB left, a block is 2 MiB
        kv_capacity_blocks(h100, m8, gpu_memory_utilization=just_over)
    with pytest.raises(ValueError, match=r"gpu_memory_utilization=1\.5"):
        kv_capacity_blocks(h100, m70, tp=4, gpu_memory_utilization=1.5)


# ---- sanity print (not asserted: published figures vary by engine version) ----------------------------
def test_sanity_print() -> None:
    pm8 = PerfModel.from_names("h100-sxm", "llama-3.1-8b")
    pm70 = PerfModel.from_names("h100-sxm", "llama-3.1-70b", tp=4)
    lines = [
        f"8B  H100 bf16 prefill  512 tok : {pm8.prefill_time_s(512) * 1e3:7.2f} ms",
        f"8B  H100 bf16 prefill 2048 tok : {pm8.prefill_time_s(2048) * 1e3:7.2f} ms   (published ~60-90)",
        f"8B  H100 bf16 decode b=1  c=1024: {pm8.decode_step_time_s(1, 1024) * 1e3:7.2f} ms   (published ~6-8)",
        f"8B  H100 bf16 decode b=64 c=1024: {pm8.decode_step_time_s(64, 1024) * 1e3:7.2f} ms",
        f"70B H100 TP4  prefill 2048 tok : {pm70.prefill_time_s(2048) * 1e3:7.2f} ms",
        f"70B H100 TP4  decode b=1  c=1024: {pm70.decode_step_time_s(1, 1024) * 1e3:7.2f} ms   (published ~15-20)",
        f"70B H100 TP4  decode b=64 c=1024: {pm70.decode_step_time_s(64, 1024) * 1e3:7.2f} ms",
    ]
    mixed = ([(512, 4096), (128, 0, False)], list(range(1000, 1256)))
    per_call = min(timeit.repeat(lambda: pm8.iteration_time_s(*mixed), number=2000, repeat=3)) / 2000
    lines.append(f"iteration_time_s, 2 prefills + 256 decodes: {per_call * 1e6:.1f} us/call")
    print("\n" + "\n".join(lines))


def test_the_sampler_streams_its_bytes_per_logit_for_each_emitting_sequence() -> None:
    """``Efficiency.sampler_bytes_per_logit``: the sampler costs that many bytes per vocabulary entry of each
    sequence that emits a token, at the streaming bandwidth; nothing else in the iteration changes."""
    import dataclasses

    from agentreplay.perf import PerfModel, load_gpu, load_model

    gpu, model = load_gpu("h100-sxm"), load_model("llama-3.1-8b")
    base = PerfModel(gpu, model)
    assert gpu.efficiency.sampler_bytes_per_logit == 8.0  # the fp32 logits read and written once
    heavy = PerfModel(gpu, model, efficiency=dataclasses.replace(gpu.efficiency, sampler_bytes_per_logit=400.0))
    a, b = base.breakdown([], [500] * 16), heavy.breakdown([], [500] * 16)
    assert b["sampler"] == pytest.approx(50.0 * a["sampler"])
    bw = gpu.mem_bandwidth_gbps * 1e9 * gpu.efficiency.bandwidth_efficiency
    assert b["sampler"] == pytest.approx(16 * model.vocab_size * 400.0 / bw)
    assert {k: v for k, v in a.items() if k != "sampler"} == {k: v for k, v in b.items() if k != "sampler"}
    # a prefill chunk that does not emit pays no sampler
    assert heavy.breakdown([(256, 0, False)], [])["sampler"] == 0.0
