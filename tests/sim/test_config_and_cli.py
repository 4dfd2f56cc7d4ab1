"""Config validation, capacity errors before the run, and the simulate / catalog commands."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.sim import CapacityError, SimConfig, simulate
from agentreplay.sim.config import ConfigError, from_dict, load, to_toml
from tests.conftest import ROOT
from tests.factories import make_trace

runner = CliRunner()
BUNDLED = str(ROOT / "datasets" / "swebench-verified")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"hardware": {"tp": 3}}, "[hardware] tp = 3 is invalid"),
        ({"cache": {"gpu_memory_utilization": 1.5}}, "[cache] gpu_memory_utilization = 1.5 is invalid: in (0, 1]"),
        ({"workload": {"arrival": "bursty"}}, "[workload] arrival = 'bursty' is invalid"),
        ({"workload": {"concurency": 3}}, "unknown field(s) ['concurency']"),
        ({"routerx": {}}, "unknown section(s) ['routerx']"),
        ({"hardware": {"mixed_attention": "fused"}}, "[hardware] mixed_attention = 'fused' is invalid"),
    ],
)
def test_bad_config_values_name_section_field_and_range(data, message) -> None:
    with pytest.raises(ConfigError) as exc:
        from_dict(data)
    assert message in str(exc.value)


def test_toml_round_trip(tmp_path) -> None:
    cfg = SimConfig().replace(hardware={"gpu": "a100-80gb", "tp": 2}, workload={"concurrency": 8}, seed=4)
    (tmp_path / "c.toml").write_text(to_toml(cfg))
    assert load(tmp_path / "c.toml") == cfg


def test_weights_that_do_not_fit_fail_before_the_run() -> None:
    cfg = SimConfig().replace(hardware={"gpu": "rtx3090", "model": "llama-3.1-70b"})
    with pytest.raises(CapacityError, match=r"weights .* GiB/rank .* exceed the budget"):
        simulate(make_trace([[(100, 5, None)]]), cfg)


def test_no_room_for_the_longest_request_fails_with_the_numbers() -> None:
    cfg = SimConfig().replace(cache={"num_gpu_blocks": 4})
    msg = r"4 KV blocks of 16 tokens .* longest request of the trace \(105 tokens = 7 blocks\)"
    with pytest.raises(CapacityError, match=msg):
        simulate(make_trace([[(100, 5, None)]]), cfg)


def test_tp_must_divide_heads() -> None:
    with pytest.raises(CapacityError, match="tp"):
        simulate(make_trace([[(100, 5, None)]]), SimConfig().replace(hardware={"model": "toy", "tp": 8}))


def test_simulate_cli_writes_outputs(tmp_path) -> None:
    out = tmp_path / "sim"
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            BUNDLED,
            "--max-programs",
            "20",
            "--concurrency",
            "8",
            "--gpu",
            "h100-sxm",
            "--model",
            "llama-3.1-8b",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "simulation summary" in res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["programs"] == 20
    assert load(out / "config.toml").workload.concurrency == 8
    for name in ("turns.parquet", "programs.parquet", "instances.parquet"):
        assert (out / name).exists()


def test_simulate_cli_bad_option_is_a_clear_error(tmp_path) -> None:
    res = runner.invoke(app, ["simulate", "--trace", BUNDLED, "--tp", "3", "--out", str(tmp_path / "x")])
    assert res.exit_code == 1 and "tp = 3 is invalid" in res.output
    res = runner.invoke(app, ["simulate", "--trace", BUNDLED, "--gpu", "tpu9", "--out", str(tmp_path / "x")])
    assert res.exit_code == 1 and "tpu9" in res.output
    res = runner.invoke(
        app, ["simulate", "--trace", BUNDLED, "--mixed-attention", "fused", "--out", str(tmp_path / "x")]
    )
    assert res.exit_code == 1 and "mixed_attention = 'fused' is invalid" in res.output


def test_simulate_cli_mixed_attention_reaches_the_config(tmp_path) -> None:
    out = tmp_path / "sim"
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            BUNDLED,
            "--max-programs",
            "4",
            "--gpu",
            "rtxpro6000",
            "--mixed-attention",
            "apart",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    assert load(out / "config.toml").hardware.mixed_attention == "apart"


def test_catalog_lists_gpus_and_models() -> None:
    res = runner.invoke(app, ["catalog"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for name in ("h100-sxm", "rtx3090", "b200", "llama-3.1-70b", "qwen3-30b-a3b"):
        assert name in res.output


def test_one_kernel_mixed_attention_slows_mixed_iterations_only_on_tile_form_gpus() -> None:
    # agent turns: a short append to a long context, prefilled beside the other program's decodes
    trace = make_trace([[(6000, 40, 0.2), (6100, 40, 0.2), (6200, 40, None)]] * 4)
    for gpu, slower in (("rtxpro6000", True), ("h100-sxm", False)):
        res = {
            m: simulate(
                trace,
                SimConfig().replace(
                    hardware={"gpu": gpu, "perf": "refined", "mixed_attention": m}, workload={"concurrency": 4}
                ),
            )
            for m in ("apart", "one_kernel")
        }
        jct = {m: r.programs["jct_s"].sum() for m, r in res.items()}
        if slower:
            assert jct["one_kernel"] > jct["apart"]
        else:  # H100 keeps the FLOP form (FA3 on Hopper): nothing to schedule
            assert jct["one_kernel"] == jct["apart"]


def test_deployment_fields_reach_capacity_and_pricing(tmp_path) -> None:
    """[hardware] kv_cache_dtype / enforce_eager / cudagraph_mode change what the run simulates (agentreplay.perf
    .deploy): fp8 KV doubles the blocks; without CUDA graphs the 3-sequence decode steps are not padded to 4.
    The CUDA-graph fields act under deployment_kernels; without it (the default) nothing is padded, as eager."""
    trace = make_trace([[(3000, 60, None)]] * 3)
    base = SimConfig().replace(workload={"concurrency": 3})
    dk = {"deployment_kernels": True}
    runs = {
        name: simulate(trace, base.replace(hardware=hw))
        for name, hw in (
            ("default", {}),
            ("graphs", dk),
            ("eager", {**dk, "enforce_eager": True}),
            ("none", {**dk, "cudagraph_mode": "NONE"}),
            ("fp8kv", {"kv_cache_dtype": "fp8"}),
        )
    }
    jct = {k: float(r.programs["jct_s"].sum()) for k, r in runs.items()}
    assert jct["eager"] < jct["graphs"] and jct["none"] == jct["eager"] == jct["default"]
    with pytest.raises(ConfigError, match="deployment_kernels"):
        base.replace(hardware={"cudagraph_mode": "FULL_DECODE_ONLY"})
    blocks = {k: r.summary["cluster"]["num_gpu_blocks"] for k, r in runs.items()}
    assert blocks["fp8kv"] >= 2 * blocks["graphs"] and blocks["eager"] == blocks["graphs"]
    assert runs["fp8kv"].summary["cluster"]["kv_cache_dtype"] == "fp8"
    out = tmp_path / "sim"
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            BUNDLED,
            "--max-programs",
            "2",
            "--kv-cache-dtype",
            "fp8",
            "--enforce-eager",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    hw = load(out / "config.toml").hardware
    assert hw.kv_cache_dtype == "fp8" and hw.enforce_eager


def test_every_unknown_name_of_a_config_file_is_reported_at_once_with_a_suggestion(tmp_path) -> None:
    """Issue 31 (8): a typo in a later section was reported only once the first was fixed, and without a hint."""
    path = tmp_path / "typos.toml"
    path.write_text('sed = 1\n[hardware]\ngpuu = "h100-sxm"\n[cache]\nblok_size = 16\n[schedular]\nx = 1\n')
    with pytest.raises(ConfigError) as exc:
        load(path)
    lines = str(exc.value).splitlines()
    assert lines == [
        f"{path}: unknown section(s) ['schedular', 'sed'] (did you mean 'scheduler' for 'schedular', 'seed' for "
        "'sed'?)",
        f"{path}: [hardware] unknown field(s) ['gpuu'] (did you mean 'gpu'?)",
        f"{path}: [cache] unknown field(s) ['blok_size'] (did you mean 'block_size'?)",
    ]
    res = runner.invoke(app, ["simulate", "--trace", BUNDLED, "--config", str(path), "--out", str(tmp_path / "x")])
    assert res.exit_code == 1
    assert all(hint in res.output for hint in ("'scheduler'", "'gpu'", "'block_size'", str(path)))


def test_a_name_with_no_close_match_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        from_dict({"tiers": {"gpuu": 1, "zzz": 2}})
    text = str(exc.value)
    assert text.startswith("[tiers] unknown field(s) ['gpuu', 'zzz']; known: [") and "'cxl_gib'" in text


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--gpu", "h100"], "unknown gpu 'h100' (did you mean 'h100-sxm'?)"),
        (["--model", "llama-3-8b"], "unknown model 'llama-3-8b' (did you mean 'llama-3.1-8b'"),
        (["--preset", "vlm"], "unknown preset 'vlm' (did you mean 'vllm'?)"),
        (["--router", "least-load"], "(did you mean 'least-loaded'?)"),
        (["--arrival", "poison"], "(did you mean 'poisson'?)"),
    ],
)
def test_an_unknown_name_on_the_command_line_gets_a_suggestion(tmp_path, args, hint) -> None:
    res = runner.invoke(app, ["simulate", "--trace", BUNDLED, *args, "--out", str(tmp_path / "x")])
    assert res.exit_code == 1 and hint in " ".join(res.output.split()), res.output
