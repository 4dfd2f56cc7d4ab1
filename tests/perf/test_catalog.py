"""GPU and model catalogs: values match the datasheets / config.json, derived sizes, validation messages."""

from __future__ import annotations

import dataclasses

import pytest

from agentreplay.perf import Efficiency, list_gpus, list_models, load_gpu, load_model

REQUIRED_GPUS = {"rtx3090", "rtx4090", "a6000", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "rtxpro6000"}
REQUIRED_MODELS = {
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-2-7b",
    "llama-2-70b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "mixtral-8x7b",
    "qwen3-14b",
    "codellama-34b",
    "llama-4-scout-17b-16e",
    "toy",
}

# (hidden, layers, heads, kv heads, head_dim, intermediate, vocab, max_pos) as in each config.json.
CONFIG_JSON = {
    "llama-3.1-8b": (4096, 32, 32, 8, 128, 14336, 128256, 131072),
    "llama-3.1-70b": (8192, 80, 64, 8, 128, 28672, 128256, 131072),
    "llama-2-7b": (4096, 32, 32, 32, 128, 11008, 32000, 4096),
    "llama-2-70b": (8192, 80, 64, 8, 128, 28672, 32000, 4096),
    "qwen3-32b": (5120, 64, 64, 8, 128, 25600, 151936, 40960),
    "qwen3-30b-a3b": (2048, 48, 32, 4, 128, 6144, 151936, 40960),
    "mixtral-8x7b": (4096, 32, 32, 8, 128, 14336, 32000, 32768),
    "qwen3-14b": (5120, 40, 40, 8, 128, 17408, 151936, 40960),
    "codellama-34b": (8192, 48, 64, 8, 128, 22016, 32000, 16384),
    # text_config; intermediate_size here is config.json's intermediate_size_mlp (the per-expert width is 8192)
    "llama-4-scout-17b-16e": (5120, 48, 40, 8, 128, 16384, 202048, 10485760),
}


def test_catalogs_list_the_required_entries() -> None:
    assert set(list_gpus()) >= REQUIRED_GPUS
    assert set(list_models()) >= REQUIRED_MODELS


@pytest.mark.parametrize("name", sorted(CONFIG_JSON))
def test_model_shapes_match_config_json(name: str) -> None:
    m = load_model(name)
    got = (
        m.hidden_size,
        m.num_hidden_layers,
        m.num_attention_heads,
        m.num_key_value_heads,
        m.head_dim,
        m.intermediate_size,
        m.vocab_size,
        m.max_position_embeddings,
    )
    assert got == CONFIG_JSON[name]
    assert m.tie_word_embeddings is False


def test_moe_fields() -> None:
    qwen = load_model("qwen3-30b-a3b")
    assert (qwen.num_experts, qwen.experts_per_token, qwen.moe_intermediate_size) == (128, 8, 768)
    mixtral = load_model("mixtral-8x7b")
    assert (mixtral.num_experts, mixtral.experts_per_token, mixtral.moe_intermediate_size) == (8, 2, 14336)
    assert not load_model("llama-3.1-8b").is_moe


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("llama-3.1-8b", 8_030_261_248),  # the published parameter count of Llama-3.1-8B
        ("llama-2-7b", 6_738_415_616),
        ("llama-3.1-70b", 70_553_706_496),
        ("qwen3-32b", 32_762_123_264),  # "32.8B"
        ("qwen3-30b-a3b", 30_532_122_624),  # "30.5B total"
        ("mixtral-8x7b", 46_702_792_704),  # "46.7B"
    ],
)
def test_param_count(name: str, params: int) -> None:
    assert load_model(name).param_count() == params


def test_weight_and_kv_bytes() -> None:
    m = load_model("llama-3.1-8b")
    assert m.weight_bytes("bf16") == 2 * m.param_count()
    # fp8 halves only the decoder's linear layers; embedding and LM head (2 x 525M params) stay bf16.
    assert m.weight_bytes("fp8") == m.param_count() + 2 * 128256 * 4096 + 32 * 2 * 4096 + 4096
    assert m.weight_bytes("bf16", tp=2) == pytest.approx(m.weight_bytes("bf16") / 2, rel=1e-4)
    assert m.kv_bytes_per_token("bf16") == 2 * 32 * 8 * 128 * 2 == 131072
    assert m.kv_bytes_per_token("bf16", tp=2) == 65536
    assert m.kv_bytes_per_token("fp8") == 65536
    # Fewer KV heads than ranks: each rank keeps one (replicated) head.
    assert load_model("llama-3.1-70b").kv_bytes_per_token("bf16", tp=8) == 2 * 80 * 1 * 128 * 2
    assert load_model("qwen3-30b-a3b").kv_bytes_per_token("bf16", tp=8) == 2 * 48 * 1 * 128 * 2


@pytest.mark.parametrize(
    ("name", "tp", "message"),
    [
        ("llama-3.1-8b", 3, r"llama-3\.1-8b: tp=3 does not divide num_attention_heads=32"),
        ("llama-2-7b", 64, r"llama-2-7b: tp=64 does not divide num_attention_heads=32"),
        ("llama-3.1-8b", 0, r"llama-3\.1-8b: tensor parallel size tp=0"),
    ],
)
def test_invalid_tp_names_model_field_and_value(name: str, tp: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_model(name).validate_tp(tp)


USER_MODELS = """
[model."odd-kv"]
hf_repo = "none"
model_type = "llama"
hidden_size = 768
num_hidden_layers = 2
num_attention_heads = 12
num_key_value_heads = 3
head_dim = 64
intermediate_size = 2048
vocab_size = 1000
max_position_embeddings = 2048
tie_word_embeddings = true
"""


def test_user_model_file_and_kv_head_divisibility(tmp_path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(USER_MODELS)
    assert list_models(path) == ["odd-kv"]
    m = load_model("odd-kv", path)
    assert m.param_count() == 1000 * 768 + 2 * (768 * (768 + 2 * 192) + 768 * 768 + 3 * 768 * 2048 + 2 * 768) + 768
    with pytest.raises(ValueError, match="odd-kv: tp=2 does not divide num_key_value_heads=3"):
        m.validate_tp(2)
    with pytest.raises(ValueError, match="odd-kv: tp=4 is not a multiple of num_key_value_heads=3"):
        m.validate_tp(4)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("shared_expert_intermediate_size = 256", r"shared_expert_intermediate_size=256 needs a MoE model"),
        ("shared_expert_intermediate_size = -1", r"shared_expert_intermediate_size=-1 must be an integer >= 0"),
        ('bf16_attention = "yes"', r"bf16_attention='yes' must be true or false"),
    ],
)
def test_shared_expert_and_bf16_attention_are_checked(tmp_path, extra: str, message: str) -> None:
    path = tmp_path / "models.toml"
    path.write_text(USER_MODELS + extra + "\n")
    with pytest.raises(ValueError, match=message):
        load_model("odd-kv", path)


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown gpu 'h100' \(did you mean 'h100-sxm'\?\) in .*; known: a100"):
        load_gpu("h100")
    with pytest.raises(ValueError, match=r"unknown model 'llama-3-8b'.*llama-3\.1-8b"):
        load_model("llama-3-8b")


def test_gpu_datasheet_values() -> None:
    h100 = load_gpu("h100-sxm")
    assert (h100.bf16_tflops, h100.fp8_tflops, h100.mem_bandwidth_gbps, h100.memory_gib) == (989.4, 1978.9, 3350, 80)
    assert h100.gemm_peak_tflops("fp8") == 1978.9
    a100 = load_gpu("a100-80gb")
    assert not a100.has_fp8
    assert a100.gemm_peak_tflops("fp8") == a100.bf16_tflops == 312
    assert load_gpu("h200").memory_gib == 141
    assert load_gpu("rtx4090").usable_memory_gib == pytest.approx(25_250_627_584 / 2**30, abs=1e-3)
    assert (load_gpu("rtx4090").sm_count, load_gpu("rtx4090").smem_per_sm_kib) == (128, 100)
    assert (h100.sm_count, h100.smem_per_sm_kib) == (132, 228)


@pytest.mark.parametrize("name", sorted(REQUIRED_GPUS | {"a40", "l40s"}))
def test_every_gpu_loads_consistently(name: str) -> None:
    g = load_gpu(name)
    assert g.has_fp8 == (g.architecture != "ampere"), "fp8 tensor cores exist from Ada on"
    assert 0 < g.usable_memory_gib <= g.memory_gib
    assert g.bf16_tflops > 0 and g.mem_bandwidth_gbps > 0 and g.interconnect_bw_gbps > 0
    # within the bounds `agentreplay calibrate` fits in (validation/calibration/settings.py BOUNDS)
    assert 0.2 <= g.efficiency.compute_efficiency <= 1.0
    assert 0.3 <= g.efficiency.bandwidth_efficiency <= 1.0
    assert g.sm_count > 0 and g.smem_per_sm_kib >= 100  # every catalog GPU: the tile form of prefill attention


GPU_ENTRY = """
[gpu."my-gpu"]
display_name = "My GPU"
architecture = "{arch}"
memory_gib = 32
mem_bandwidth_gbps = 1000
bf16_tflops = 100
interconnect = "pcie"
interconnect_bw_gbps = 32
[gpu."my-gpu".efficiency]
compute_efficiency = 0.5
"""


def test_user_gpu_file_uses_packaged_defaults(tmp_path) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text(GPU_ENTRY.format(arch="ada"))
    g = load_gpu("my-gpu", path)
    import tomllib
    from pathlib import Path

    import agentreplay.perf

    catalog = Path(agentreplay.perf.__file__).parent / "catalog" / "gpus.toml"
    defaults = tomllib.loads(catalog.read_text())["defaults"]["efficiency"]
    assert g.efficiency.compute_efficiency == 0.5
    assert g.efficiency.bandwidth_efficiency == defaults["bandwidth_efficiency"]
    assert g.fp8_tflops == 0 and g.usable_memory_gib == 31.5
    assert g.sm_count == 0 and g.smem_per_sm_kib == 0  # optional: no tile-level attention pricing


def test_user_gpu_file_errors(tmp_path) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text(GPU_ENTRY.format(arch="volta"))
    with pytest.raises(ValueError, match=r"architecture='volta'; allowed: \['ampere', 'ada', 'hopper', 'blackwell'\]"):
        load_gpu("my-gpu", path)
    path.write_text(GPU_ENTRY.format(arch="ada").replace("bf16_tflops", "hbm_gbps = 3\nbf16_tflops"))
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['hbm_gbps'\]"):
        load_gpu("my-gpu", path)
    path.write_text(GPU_ENTRY.format(arch="ada").replace("bf16_tflops", "sm_count = 12.5\nbf16_tflops"))
    with pytest.raises(ValueError, match=r"sm_count=12.5 must be an integer >= 0"):
        load_gpu("my-gpu", path)
    with pytest.raises(ValueError, match="catalog file not found"):
        load_gpu("my-gpu", tmp_path / "missing.toml")


def test_efficiency_validation() -> None:
    eff = load_gpu("h100-sxm").efficiency
    with pytest.raises(ValueError, match=r"Efficiency.compute_efficiency=1.5 must be in \(0, 1\]"):
        dataclasses.replace(eff, compute_efficiency=1.5)
    with pytest.raises(ValueError, match=r"Efficiency.framework_overhead_ms=-1.0 must be >= 0"):
        dataclasses.replace(eff, framework_overhead_ms=-1.0)
    assert isinstance(eff, Efficiency)


def test_catalog_rows_list_every_gpu_and_model_with_its_key_numbers() -> None:
    """What ``agentreplay catalog`` prints (agentreplay.perf.catalog.catalog_rows), checked against the specs."""
    from agentreplay.perf.catalog import catalog_rows

    rows = catalog_rows()
    assert [g["name"] for g in rows["gpus"]] == list_gpus() and [m["name"] for m in rows["models"]] == list_models()
    by_gpu = {g["name"]: g for g in rows["gpus"]}
    h100, a100 = load_gpu("h100-sxm"), by_gpu["a100-80gb"]
    assert by_gpu["h100-sxm"] == {
        "name": "h100-sxm",
        "memory_gib": h100.memory_gib,
        "hbm_gbps": h100.mem_bandwidth_gbps,
        "bf16_tflops": h100.bf16_tflops,
        "fp8_tflops": h100.fp8_tflops,
        "interconnect": h100.interconnect,
        "interconnect_gbps": h100.interconnect_bw_gbps,
    }
    assert a100["fp8_tflops"] is None  # Ampere: no fp8 tensor cores
    by_model = {m["name"]: m for m in rows["models"]}
    dense, moe = by_model["llama-3.1-8b"], by_model["mixtral-8x7b"]
    assert dense["experts"] is None and dense["experts_per_token"] is None
    assert dense["params_b"] == load_model("llama-3.1-8b").param_count() / 1e9
    assert dense["kv_bytes_per_token_bf16"] == load_model("llama-3.1-8b").kv_bytes_per_token("bf16")
    assert (moe["experts"], moe["experts_per_token"]) == (8, 2)
