"""The three models of the measured H100 vLLM runs (../shared/measurements/serving-vllm-inference-sim) that the
catalogue gained: Qwen3-14B, CodeLlama-34B and Llama-4-Scout-17B-16E (FP8). Shapes against config.json, the shared
expert's FLOPs and bytes, the Scout checkpoint's bf16 attention, pricing at the runs' TP, and the memory plan."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from agentreplay.perf import PerfModel, kv_capacity, load_gpu, load_model
from agentreplay.perf.catalog import ModelSpec
from tests.conftest import shared_path

SCOUT = "llama-4-scout-17b-16e"
#: (model, dtype, TP) of the measured runs (experiment_index.csv) and of TP1 / TP2 around them
CONFIGS = [
    ("qwen3-14b", "bf16", 1),  # measured at TP1
    ("qwen3-14b", "bf16", 2),
    ("codellama-34b", "bf16", 1),
    ("codellama-34b", "bf16", 2),  # measured at TP2
    (SCOUT, "fp8", 2),  # measured at TP2 (RedHatAI FP8-dynamic checkpoint)
]
#: the runs' vLLM limits (campaign-config-notes.md): max_model_len 4096 in blocks of 16 tokens
MAX_MODEL_LEN_BLOCKS = 4096 // 16


def test_shapes_match_config_json() -> None:
    """Hyper-parameters as in each config.json (Qwen3-14B and the text_config of Llama-4-Scout-17B-16E-Instruct
    from huggingface.co; CodeLlama-34B also checked against the copied file in test_codellama_matches_the_copy)."""
    q = load_model("qwen3-14b")
    assert (q.hidden_size, q.num_hidden_layers, q.num_attention_heads, q.num_key_value_heads, q.head_dim) == (
        5120,
        40,
        40,
        8,
        128,
    )
    assert (q.intermediate_size, q.vocab_size, q.max_position_embeddings, q.qk_norm) == (17408, 151936, 40960, True)
    assert not q.is_moe and not q.tie_word_embeddings
    s = load_model(SCOUT)
    assert (s.hidden_size, s.num_hidden_layers, s.num_attention_heads, s.num_key_value_heads, s.head_dim) == (
        5120,
        48,
        40,
        8,
        128,
    )
    assert (s.num_experts, s.experts_per_token, s.moe_intermediate_size, s.shared_expert_intermediate_size) == (
        16,
        1,
        8192,
        8192,
    )
    assert (s.vocab_size, s.tie_word_embeddings, s.bf16_attention) == (202048, False, True)


@pytest.mark.shared
def test_codellama_matches_the_copy() -> None:
    path = shared_path(
        "measurements",
        "serving-vllm-inference-sim",
        "inference-sim__training",
        "model_configs",
        "CodeLlama-34b-Instruct-hf",
        "config.json",
    )
    cfg = json.loads(path.read_text())
    m = load_model("codellama-34b")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads"):
        assert getattr(m, key) == cfg[key], key
    for key in ("intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings"):
        assert getattr(m, key) == cfg[key], key
    assert m.head_dim == cfg["hidden_size"] // cfg["num_attention_heads"]


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("qwen3-14b", 14_768_307_200),  # "14.8B"
        ("codellama-34b", 33_743_970_304),  # "34B" (33.7B)
        (SCOUT, 107_769_861_120),  # text model of "109B total" (the ~0.87B vision tower is not in the catalogue)
    ],
)
def test_param_count(name: str, params: int) -> None:
    assert load_model(name).param_count() == params


def _no_shared(spec: ModelSpec) -> ModelSpec:
    return dataclasses.replace(spec, shared_expert_intermediate_size=0)


def test_shared_expert_weights_are_counted() -> None:
    """48 layers x gate, up, down of 5120 x 8192: in the parameter count and, fp8 and split over TP2, in each
    rank's weight bytes (memory model)."""
    scout = load_model(SCOUT)
    shared = 48 * 3 * 5120 * 8192
    assert scout.param_count() - _no_shared(scout).param_count() == shared
    assert scout.weight_bytes("fp8", 2) - _no_shared(scout).weight_bytes("fp8", 2) == shared // 2  # 1 byte each
    assert scout.weight_bytes("bf16", 2) - _no_shared(scout).weight_bytes("bf16", 2) == shared


@pytest.mark.parametrize(("prefill", "decode"), [([(2048, 0)], []), ([], [1000]), ([], [500] * 64)])
def test_shared_expert_adds_its_flops_and_bytes(prefill, decode) -> None:
    """Every token runs the shared expert in every MoE layer: gate_up_proj, act_fn and down_proj grow by a dense
    MLP of width 8192 / TP (fp8 weights at the fp8 peak), the kernel count by 3 per layer, the routed experts'
    work (experts_time_s) not at all. Fails if the shared expert is dropped from the pricer."""
    gpu = load_gpu("h100-sxm")
    eff = gpu.efficiency
    with_shared = PerfModel(gpu, load_model(SCOUT), "fp8", 2)
    without = PerfModel(gpu, _no_shared(load_model(SCOUT)), "fp8", 2)
    a, b = with_shared.breakdown(prefill, decode), without.breakdown(prefill, decode)
    tokens = sum(c for c, *_ in prefill) + len(decode)
    peak = gpu.fp8_tflops * 1e12 * eff.compute_efficiency
    bw = gpu.mem_bandwidth_gbps * 1e9 * eff.bandwidth_efficiency
    h, w = 5120, 8192 // 2  # hidden, shared expert width per rank

    def gemm_s(k_in: int, n_out: int) -> float:  # max(FLOP time, weight bytes + activation bytes)
        return max(tokens * 2 * k_in * n_out / peak, (k_in * n_out * 1 + tokens * (k_in + n_out) * 2) / bw)

    assert a["gate_up_proj"] - b["gate_up_proj"] == pytest.approx(48 * gemm_s(h, 2 * w), rel=1e-9)
    assert a["down_proj"] - b["down_proj"] == pytest.approx(48 * gemm_s(w, h), rel=1e-9)
    assert a["act_fn"] - b["act_fn"] == pytest.approx(48 * tokens * 3 * w * 2 / bw, rel=1e-9)
    assert a["kernel_overhead"] - b["kernel_overhead"] == pytest.approx(48 * 3 * eff.kernel_overhead_us * 1e-6)
    for op in ("qkv_proj", "o_proj", "moe_router", "attention_prefill", "attention_decode", "lm_head"):
        assert a[op] == b[op], op
    assert with_shared.experts_time_s(tokens) == without.experts_time_s(tokens)  # routed experts only


def test_scout_attention_and_router_stay_bf16() -> None:
    """The RedHatAI FP8-dynamic checkpoint leaves self_attn unquantized (vLLM PR #34243: "w/o attention quant")
    and vLLM builds the router with quant_config=None: q/k/v/o and the router cost what they cost in bf16, the
    experts and the shared expert run fp8."""
    scout = load_model(SCOUT)
    fp8 = PerfModel.from_names("h100-sxm", SCOUT, "fp8", 2)
    bf16 = PerfModel.from_names("h100-sxm", SCOUT, "bf16", 2)
    quantized = PerfModel(load_gpu("h100-sxm"), dataclasses.replace(scout, bf16_attention=False), "fp8", 2)
    for shot in (([(2048, 0)], []), ([], [1000] * 32)):
        f, b, q = fp8.breakdown(*shot), bf16.breakdown(*shot), quantized.breakdown(*shot)
        for op in ("qkv_proj", "o_proj", "moe_router"):
            assert f[op] == b[op], op
        assert q["qkv_proj"] < f["qkv_proj"] and q["o_proj"] < f["o_proj"]
        assert f["gate_up_proj"] < b["gate_up_proj"] and f["down_proj"] < b["down_proj"]
    attn = 48 * (5120 * (5120 + 2 * 1024) + 5120 * 5120) // 2  # q/k/v/o parameters per TP2 rank
    fp8_attention = dataclasses.replace(scout, bf16_attention=False)
    assert scout.weight_bytes("fp8", 2) - fp8_attention.weight_bytes("fp8", 2) == attn  # 2 bytes each, not 1


@pytest.mark.parametrize(("name", "dtype", "tp"), CONFIGS)
def test_prices_prefill_and_decode(name: str, dtype: str, tp: int) -> None:
    pm = PerfModel.from_names("h100-sxm", name, dtype, tp)  # type: ignore[arg-type]
    prefill, decode = pm.prefill_time_s(2048), pm.decode_step_time_s(64, 1000)
    assert 0 < pm.prefill_time_s(512) < prefill < 1.0
    assert 0 < pm.decode_step_time_s(1, 1000) < decode < prefill
    assert math.isfinite(prefill) and math.isfinite(decode)
    mixed_pf, mixed_dec = [(1024, 200)], [300, 4000]
    parts = pm.breakdown(mixed_pf, mixed_dec)
    assert sum(parts.values()) == pytest.approx(pm.iteration_time_s(mixed_pf, mixed_dec), rel=1e-12)


@pytest.mark.parametrize(("name", "dtype", "tp"), CONFIGS)
def test_memory_plans_an_h100_instance(name: str, dtype: str, tp: int) -> None:
    """Each configuration fits an H100 SXM at vLLM's default gpu_memory_utilization with room for a 4096-token
    request (the runs' max_model_len)."""
    cap = kv_capacity(load_gpu("h100-sxm"), load_model(name), dtype, tp)  # type: ignore[arg-type]
    assert cap.blocks >= MAX_MODEL_LEN_BLOCKS
    assert cap.weight_bytes + cap.reserve_bytes + cap.kv_bytes <= cap.budget_bytes


def test_scout_does_not_fit_one_h100() -> None:
    with pytest.raises(ValueError, match=r"llama-4-scout-17b-16e \(fp8, tp=1\) on h100-sxm: weights 10\d\.\d\d GiB"):
        kv_capacity(load_gpu("h100-sxm"), load_model(SCOUT), "fp8", 1)
