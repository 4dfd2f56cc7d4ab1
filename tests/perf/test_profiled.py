"""Profiled deployments (DESIGN §5): a TP-N deployment with a shipped deployment profile of that TP is priced from
that TP's own table (never the TP-1 table scaled), its TP collectives once (the profiles hold none), and ``auto``
picks the table pricer only for exactly the profiled (GPU, model, dtype, KV dtype, TP)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentreplay.perf import PerfModel, RefinedPerfModel, TablePerfModel
from agentreplay.perf.table import (
    MeasuredTable,
    TableOrigin,
    choose_pricer,
    load_table_origins,
    load_tables,
    pricer_from_names,
)

QWEN_TP2 = "rtxpro6000/qwen3-32b/tp2"


def _qwen(tp: int) -> MeasuredTable:
    return load_tables()[f"rtxpro6000/qwen3-32b/tp{tp}"]


def test_the_tp2_profile_ships_as_its_own_deployment_table() -> None:
    t2, origin = _qwen(2), load_table_origins()[QWEN_TP2]
    assert (t2.tp, t2.dtype, t2.name) == (2, "bf16", "llmservingsim-perf/rtxpro6000/qwen3-32b/bf16/tp2")
    assert origin.deployment_profile and (origin.engine, origin.engine_version, origin.kv_dtype) == (
        "vllm",
        "0.19.0",
        "bf16",
    )
    assert {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"} <= set(t2.ops)
    assert t2.attention_prefill is not None and t2.attention_decode is not None


def test_tp2_is_priced_from_the_tp2_profile_not_the_tp1_scaled() -> None:
    """Fails if ``from_names`` scales the TP=1 table again: it prices exactly as the TP-2 table unscaled, sits on
    the TP-2 measurements (made non-decreasing first) where the scaled TP-1 table is off, and whole iterations
    differ."""
    pm = TablePerfModel.from_names("rtxpro6000", "qwen3-32b", tp=2)
    t1, t2 = _qwen(1), _qwen(2)
    assert pm.table is t2 and pm.tp == 2
    own = TablePerfModel(t2, pm.fallback)
    scaled = TablePerfModel(t1, pm.fallback, RefinedPerfModel.from_names("rtxpro6000", "qwen3-32b", tp=1))
    layers = pm.model.num_hidden_layers

    def miss(p: TablePerfModel, op: str) -> float:
        """Median relative miss at the TP-2 measurements of ``op`` (0 where they are non-decreasing)."""
        tokens, seconds = t2.ops[op]
        return float(
            np.median(
                [
                    abs(p.breakdown([(n, 0, False)], ())[op] / (layers * s) - 1)
                    for n, s in zip(tokens, seconds, strict=True)
                ]
            )
        )

    for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        assert miss(pm, op) < 1e-9 and miss(scaled, op) > 0.01, op
    for prefill, decode in (((), [1000]), ((), [1000] * 64), ([(2048, 0)], ()), ([(512, 1024)], [800] * 32)):
        a, b = pm.iteration_time_s(prefill, decode), scaled.iteration_time_s(prefill, decode)
        assert a == own.iteration_time_s(prefill, decode)
        assert a > 0 and abs(a / b - 1) > 1e-3, (prefill, len(decode))


def test_tp_collectives_are_priced_once() -> None:
    """The profile holds one rank's operators (LLMServingSim profiles every TP on one GPU): the table pricer's TP
    collectives are its fallback's (no measured all-reduce curve of this GPU), added once, and none of the
    table's operators is a collective."""
    pm = TablePerfModel.from_names("rtxpro6000", "qwen3-32b", tp=2)
    assert pm.all_reduce is None and not pm.covers("tp_comm") and "tp_comm" not in pm.table.ops
    for prefill, decode in (((), [500] * 16), ([(1024, 0)], [300] * 8)):
        got, fb = pm.breakdown(prefill, decode), pm.fallback.breakdown(prefill, decode)
        assert got["tp_comm"] == fb["tp_comm"] > 0
        assert sum(got.values()) == pytest.approx(pm.iteration_time_s(prefill, decode), rel=1e-12)


def test_another_tp_of_a_profiled_model_is_scaled_from_the_nearest() -> None:
    pm = TablePerfModel.from_names("rtxpro6000", "qwen3-32b", tp=4)
    assert pm.table is _qwen(2) and pm.tp == 4  # nearest profiled TP, scaled by the roofline's ratio


@pytest.mark.parametrize(
    ("gpu", "model", "dtype", "tp", "kv", "kind", "why"),
    [
        ("rtx4090", "llama-3.1-8b", "bf16", 1, "bf16", "table", "rtx4090/llama-3.1-8b/bf16/tp1"),
        ("rtxpro6000", "qwen3-32b", "bf16", 2, "bf16", "table", "TP collectives"),
        ("rtxpro6000", "qwen3-32b", "bf16", 1, "bf16", "table", "qwen3-32b/bf16/tp1"),
        ("rtxpro6000", "qwen3-32b", "bf16", 4, "bf16", "roofline", "profiled at TP 1, 2 only"),
        ("rtx4090", "llama-3.1-8b", "bf16", 2, "bf16", "roofline", "profiled at TP 1 only"),
        ("rtx4090", "llama-3.1-8b", "fp8", 1, "bf16", "roofline", "not fp8"),
        ("rtx4090", "llama-3.1-8b", "bf16", 1, "fp8", "roofline", "with a fp8 KV cache"),
        ("rtx4090", "qwen3-32b", "bf16", 1, "bf16", "roofline", "no per-layer profile"),
        ("l40s", "llama-3.1-8b", "bf16", 1, "bf16", "roofline", "no per-layer profile"),
        # a table of the same shapes that is no profile of the deployment (HF-transformers modules, LLMServingSim v0)
        ("h100-sxm", "llama-3.1-8b", "bf16", 1, "bf16", "roofline", "kernel profile taken outside"),
    ],
)
def test_auto_picks_the_table_only_for_the_exact_deployment(
    gpu: str, model: str, dtype: str, tp: int, kv: str, kind: str, why: str
) -> None:
    choice = choose_pricer(gpu, model, dtype, tp, kv_dtype=kv)
    assert choice.kind == kind and why in choice.reason, choice
    assert (choice.table is not None) == (kind == "table")
    pm = pricer_from_names("auto", gpu, model, dtype, tp, kv_dtype=kv)  # type: ignore[arg-type]
    assert isinstance(pm, TablePerfModel) if kind == "table" else type(pm) is PerfModel
    if kind == "table":
        assert pm.table is load_tables()[choice.table]  # type: ignore[union-attr,index]


def _write(dst: Path, origin: TableOrigin | None, dtype: str = "bf16") -> None:
    from validation.calibration.calibrate import write_tables
    from validation.catalog import Catalog

    key = "rtx4090/llama-3.1-8b/tp1"
    t = load_tables()[key]
    write_tables(
        {key: MeasuredTable(t.name, t.gpu, t.model, t.tp, dtype, t.ops)},
        Catalog.create(dst.parent),
        None,
        {key: origin} if origin else None,
    )


def test_auto_reads_the_tables_beside_the_catalog(tmp_path: Path) -> None:
    """A user's own profile (a ``tables.toml`` beside their ``gpus.toml``) is what ``auto`` looks for; a table
    without an engine (a kernel profile) is not a deployment profile."""
    cat = tmp_path / "gpus.toml"  # (choose_pricer reads only the tables.toml beside it)
    _write(tmp_path / "tables.toml", TableOrigin("rtx4090/llama-3.1-8b/tp1", "mine/tp1", "vllm", "0.20.0", "bf16"))
    got = choose_pricer("rtx4090", "llama-3.1-8b", catalog=cat)
    assert got.kind == "table" and "vllm 0.20.0" in got.reason
    assert got.source == load_tables()["rtx4090/llama-3.1-8b/tp1"].name  # written as the table's source
    assert choose_pricer("rtx4090", "llama-3.1-8b", kv_dtype="fp8", catalog=cat).kind == "roofline"
    _write(tmp_path / "tables.toml", TableOrigin("k", "mine/tp1", "vllm", "0.20.0", "bf16"), dtype="fp8")
    assert choose_pricer("rtx4090", "llama-3.1-8b", catalog=cat).kind == "roofline"
    assert choose_pricer("rtx4090", "llama-3.1-8b", "fp8", catalog=cat).kind == "table"
    _write(tmp_path / "tables.toml", None)
    assert choose_pricer("rtx4090", "llama-3.1-8b", catalog=cat).kind == "roofline"
    bad = tmp_path / "bad.toml"
    bad.write_text('[table."a/b/tp1"]\ngpu = "a"\nmodel = "b"\ntp = 1\nengine = "vllm"\n')
    with pytest.raises(ValueError, match="engine, engine_version and kv_dtype go together"):
        load_table_origins(bad)


def test_cli_resolves_auto_and_records_why(tmp_path: Path) -> None:
    from agentreplay.perf.auto import resolve
    from agentreplay.sim.config import SimConfig

    cfg = SimConfig().replace(hardware={"gpu": "rtx4090", "model": "llama-3.1-8b"})
    got, rec = resolve(cfg, None, None)
    assert got.hardware.perf == "table" and rec["requested"] == "auto" and rec["kind"] == "table"
    assert rec["table"] == "rtx4090/llama-3.1-8b/tp1"
    got, rec = resolve(cfg.replace(hardware={"gpu": "h100-sxm"}), "auto", None)
    assert got.hardware.perf == "roofline" and rec["table"] is None and "kernel profile" in rec["reason"]
    refined = cfg.replace(hardware={"perf": "refined"})  # (build_config applies --perf before resolving)
    got, rec = resolve(refined, "refined", None)
    assert got is refined and rec == {"requested": "refined", "kind": "refined", "reason": "--perf"}
    toml = tmp_path / "c.toml"
    toml.write_text('[hardware]\nperf = "roofline"\n')
    got, rec = resolve(cfg, None, toml)  # the file's choice stands (cfg here: as build_config loaded it)
    assert got is cfg and rec["kind"] == "roofline" and str(toml) in rec["reason"]
    groups = cfg.replace(hardware={"groups": ("rtx4090:1:1", "l40s:1:1")})
    got, rec = resolve(groups, None, None)
    assert got.hardware.perf == "roofline" and "not every group is profiled" in rec["reason"]


def test_simulate_writes_the_pricer_into_the_summary(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from agentreplay.cli import app

    root = Path(__file__).resolve().parents[2]
    args = ["simulate", "--trace", str(root / "datasets" / "swebench-verified"), "--max-programs", "2", "--quiet"]
    args += ["--error-bands", "none", "--model", "llama-3.1-8b"]
    for gpu, perf, kind in (
        ("rtx4090", None, "table"),
        ("rtx4090", "roofline", "roofline"),
        ("h100-sxm", None, "roofline"),
    ):
        out = tmp_path / f"{gpu}-{perf}"
        res = CliRunner().invoke(app, [*args, "--gpu", gpu, "--out", str(out), *(["--perf", perf] if perf else [])])
        assert res.exit_code == 0, res.output
        rec = json.loads((out / "summary.json").read_text())["pricer"]
        assert rec["kind"] == kind and rec["requested"] == (perf or "auto")
        assert f'perf = "{kind}"' in (out / "config.toml").read_text()


def test_variant_dtypes() -> None:
    from validation.calibration.tables import variant_dtypes

    assert variant_dtypes("bf16") == ("bf16", "bf16")
    assert variant_dtypes("bf16-kvfp8") == ("bf16", "fp8")
    assert variant_dtypes("fp8-kvfp8") == ("fp8", "fp8")
    assert variant_dtypes("awq-int4") is None and variant_dtypes(None) is None


@pytest.mark.shared
@pytest.mark.slow
def test_calibrate_ships_every_tp_of_a_deployment_profile_only() -> None:
    """``agentreplay calibrate`` ships LLMServingSim's vLLM profiles at every TP (with their engine), the kernel
    profiles (v0: HF-transformers modules) at TP=1 only, as calibration cells; the packaged file is what it wrote."""
    from tests.conftest import shared_path
    from validation.calibration import calibrate as K
    from validation.measured import collect_path

    data = K.component_data(collect_path(shared_path("measurements", "profiles-llmservingsim")))
    tables = K.shipped_tables(data)
    origins = K.shipped_origins(data, tables)
    multi = {k for k, t in tables.items() if t.tp > 1}
    assert multi == {"rtxpro6000/llama-3.1-8b/tp2", "rtxpro6000/qwen3-30b-a3b/tp2", QWEN_TP2}
    assert all(origins[k].deployment_profile for k in multi)
    assert not origins["h100-sxm/llama-3.1-8b/tp1"].deployment_profile
    packaged, shipped = load_tables(), load_table_origins()
    for key in multi | {"rtx4090/llama-3.1-8b/tp1"}:
        assert shipped[key] == origins[key]
        assert {op: list(v[0]) for op, v in packaged[key].ops.items()} == {
            op: list(v[0]) for op, v in tables[key].ops.items()
        }
