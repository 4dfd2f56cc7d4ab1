"""What the validation report shows, computed (the rendering is :mod:`validation.report.render`).

Every number is computed here from ``errors.parquet``, the pricer comparison (``pricers.parquet``,
``pricer_ops.parquet``) and the catalog files; nothing is typed in. Targets (from the validation brief) are
thresholds, not results. Functions return dicts (the summary) or DataFrames; none writes or formats text.
"""

from __future__ import annotations

import itertools
import tomllib
from typing import Any, Final

import pandas as pd

from validation.calibration.data import mape
from validation.calibration.settings import GEMM_GROUPS, REFINED_STAGES
from validation.catalog import PACKAGED, Catalog
from validation.e2e import cells as e2e
from validation.report.figures import COMPONENT_METRICS, ITERATION_METRICS

TARGETS: Final = {"component_validation_mape_pct": 5.0, "vllm_run_mean_pct": 10.0}


def headline(df: pd.DataFrame, burst: pd.DataFrame | None = None) -> dict[str, Any]:
    """The figures the brief asks for, computed from the error rows."""
    out: dict[str, Any] = {"targets": TARGETS}
    comp = df[df["metric"].isin(COMPONENT_METRICS)]
    out["component_mape_pct"] = {}
    for g, d in comp.groupby("gpu"):
        v = d[d["role"] == "validation"]
        att = v["metric"].str.startswith("attention")
        out["component_mape_pct"][g] = {
            **{r: mape(d.loc[d["role"] == r, "rel_error"]) for r in ("calibration", "validation")},
            "validation_layer_time": mape(v.loc[v["metric"] == "layer_time_s", "rel_error"]),
            "validation_attention": mape(v.loc[att, "rel_error"]),
            "validation_time_weighted": float((v["rel_error"].abs() * v["measured"]).sum() / v["measured"].sum() * 100)
            if len(v)
            else float("nan"),
        }
    it = df[df["metric"].isin(ITERATION_METRICS)]
    out["splitwise_mape_pct"] = {
        g: {
            **{f"{m} MAPE": mape(d.loc[d["metric"] == m, "rel_error"]) for m in ITERATION_METRICS},
            **{
                f"{m} median APE": float(d.loc[d["metric"] == m, "rel_error"].abs().median() * 100)
                for m in ITERATION_METRICS
            },
        }
        for g, d in it.groupby("gpu")
    }
    b1 = it[(it["metric"] == "decode_iteration_s") & (it["batch_size"] == 1)]
    out["splitwise_decode_batch1_ms"] = {
        g: {
            int(tp): {
                "measured": float(x["measured"].median() * 1e3),
                "simulated": float(x["simulated"].median() * 1e3),
            }
            for tp, x in d.groupby("tp")
        }
        for g, d in b1.groupby("gpu")
    }
    run = df[df["source"] == "vllm-run"]
    out["vllm_run_pct"] = {
        m: float(run.loc[run["metric"] == m, "rel_error"].mean() * 100)
        for m in ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "throughput_output_tok_s")
        if (run["metric"] == m).any()
    }
    lp = df[(df["source"] == "llmperf") & (df["gpu"] == "rtx3090") & (df["dtype"] == "bf16")]
    tput = lp[lp["metric"] == "throughput_output_tok_s"]
    if len(tput):
        out["llmperf_rtx3090_bf16_throughput_pct"] = {
            "mean_signed": float(tput["rel_error"].mean() * 100),
            "runs": len(tput),
            "per_run": dict(zip(tput["cell_id"], (tput["rel_error"] * 100).round(2), strict=True)),
        }
    if burst is not None and len(burst):
        b = burst[burst["metric"] == "throughput_output_tok_s"]
        out["llmperf_rtx3090_bf16_burst_throughput_pct"] = float(b["rel_error"].mean() * 100)
    ag = df[df["source"] == "agent-jct"]
    if len(ag):
        out["agent_jct_pct"] = dict(zip(ag["metric"], (ag["rel_error"] * 100).round(2), strict=True))
        out["agent_caveat"] = e2e.AGENT_CAVEAT
    return out


PRICER_ORDER: Final = ("roofline", "refined", "table")
_E2E_HEAD: Final = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "throughput_output_tok_s")


def pricer_headline(p: pd.DataFrame) -> dict[str, Any]:
    """Per GPU, pricer and role: component MAPE (the metrics of the headline); per pricer: the vLLM-run and
    LLMPerf RTX 3090 BF16 errors of the replays with that pricer."""
    out: dict[str, Any] = {}
    if not len(p):
        return out
    comp = p[p["metric"].isin(COMPONENT_METRICS)]
    out["pricer_component_mape_pct"] = {
        g: {
            pr: {
                r: mape(x.loc[x["role"] == r, "rel_error"])
                for r in ("calibration", "validation", "fidelity")
                if (x["role"] == r).any()
            }
            for pr, x in d.groupby("pricer")
        }
        for g, d in comp.groupby("gpu")
    }
    val = comp[comp["role"] == "validation"]
    ar = val["metric"] == "all_reduce_s"
    out["pricer_component_parts_mape_pct"] = {  # the iteration components the target names; the all-reduce apart
        g: {
            pr: {
                "iteration_components": mape(x.loc[~ar.loc[x.index], "rel_error"]),
                "all_reduce": mape(x.loc[ar.loc[x.index], "rel_error"]),
                "all_reduce_n": int(ar.loc[x.index].sum()),
            }
            for pr, x in d.groupby("pricer")
        }
        for g, d in val.groupby("gpu")
    }
    run = p[p["source"] == "vllm-run"]
    out["pricer_vllm_run_pct"] = {
        pr: {m: float(x.loc[x["metric"] == m, "rel_error"].mean() * 100) for m in _E2E_HEAD if (x["metric"] == m).any()}
        for pr, x in run.groupby("pricer")
    }
    sw = p[p["metric"].isin(ITERATION_METRICS)]
    out["pricer_splitwise_mape_pct"] = {
        g: {
            pr: {m: mape(x.loc[x["metric"] == m, "rel_error"]) for m in ITERATION_METRICS}
            for pr, x in d.groupby("pricer")
        }
        for g, d in sw.groupby("gpu")
    }
    lp = p[(p["source"] == "llmperf") & (p["metric"] == "throughput_output_tok_s")]
    out["pricer_llmperf_rtx3090_bf16_throughput_pct"] = {
        pr: float(x["rel_error"].mean() * 100) for pr, x in lp.groupby("pricer")
    }
    return out


def _origin(rec: dict[str, Any] | None) -> str:
    """One GPU's entry of ``calibration.json`` in words: fitted, or borrowed from which GPU."""
    if rec is None:
        return "not calibrated (catalog values)"
    if rec.get("calibrated_from"):
        return f"no measured profile: those of {rec['calibrated_from']}"
    return "fitted on its own profiles"


def refinement_table(catalog: Catalog = PACKAGED) -> pd.DataFrame:
    """The parameters in the refined roofline's TOML, one row per GPU, with where they come from (``from``: its
    own fit, or borrowed from the nearest profiled GPU)."""
    with open(catalog.file("roofline.toml"), "rb") as fh:
        gpus = tomllib.load(fh).get("gpu", {})
    recs = catalog.calibration().get("refined", {}).get("gpus", {})
    params = [p for _, _, ps in REFINED_STAGES for p in ps]
    return pd.DataFrame(
        [
            {"gpu": g, "from": _origin(recs.get(g)), **{p: v.get(p, float("nan")) for p in params}}
            for g, v in sorted(gpus.items())
        ]
    )


def gpu_provenance(df: pd.DataFrame, catalog: Catalog = PACKAGED) -> pd.DataFrame:
    """Where each catalog GPU's performance parameters come from: its datasheet peaks (gpus.toml) and either its
    own fit on measured profiles (``calibration.json``: the calibration points) or, for a GPU without any measured
    profile, the kernel-level efficiencies of the nearest profiled GPU
    (:data:`validation.calibration.settings.NEAREST`); and how many measured cells of ``df`` (the errors table) judge
    it."""
    recs = catalog.calibration().get("gpus", {})
    cells = df.groupby("gpu")["cell_id"].nunique() if len(df) else pd.Series(dtype=int)
    rows = []
    for g in catalog.gpus():
        spec = catalog.gpu(g)
        rows.append(
            {
                "gpu": g,
                "architecture": spec.architecture,
                "bf16 TFLOPS": spec.bf16_tflops,
                "memory GB/s": spec.mem_bandwidth_gbps,
                "interconnect GB/s": spec.interconnect_bw_gbps,
                "efficiencies": _origin(recs.get(g)),
                "borrowed from": (recs.get(g) or {}).get("calibrated_from") or "",
                "operator points (cal. / val.)": "{calibration:,} / {validation:,}".format(
                    **(recs.get(g) or {}).get("points", {"calibration": 0, "validation": 0})
                ),
                "measured cells": int(cells.get(g, 0)),
            }
        )
    return pd.DataFrame(rows)


def error_shares(pricers: pd.DataFrame) -> pd.DataFrame:
    """Validation component points per GPU and metric: per pricer of :data:`PRICER_ORDER`, the count, the MAPE and
    the metric's share (%) of the GPU's summed absolute error (what the per-GPU MAPE is made of)."""
    comp = pricers[pricers["metric"].isin(COMPONENT_METRICS) & (pricers["role"] == "validation")]
    diag = []
    for (g, m), d in comp.groupby(["gpu", "metric"]):
        row = {"gpu": g, "metric": m}
        for pr in PRICER_ORDER[:3]:
            x = d[d["pricer"] == pr]
            tot = comp[(comp["gpu"] == g) & (comp["pricer"] == pr)]["rel_error"].abs().sum()
            row[f"{pr} n"] = len(x)
            row[f"{pr} MAPE %"] = mape(x["rel_error"])
            row[f"{pr} share %"] = float(x["rel_error"].abs().sum() / tot * 100) if tot else float("nan")
        diag.append(row)
    return pd.DataFrame(diag)


def operator_errors_by_pricer(pricer_ops: pd.DataFrame) -> pd.DataFrame:
    """MAPE (%) per GPU and operator group (rows), pricer and role (columns ``"<pricer> cal."`` / ``"val."``)."""
    t = pricer_ops.groupby(["gpu", "group", "pricer", "role"])["rel_error"].apply(mape).unstack(["pricer", "role"])
    cols = [(pr, r) for pr in PRICER_ORDER for r in ("calibration", "validation") if (pr, r) in t.columns]
    t = t.reindex(columns=cols)
    t.columns = [f"{pr} {r[:3]}." for pr, r in cols]
    return t


_BANDS: Final = (0, 16, 64, 256, 1024, 1 << 30)


def gemm_error_bands(ops: pd.DataFrame) -> pd.DataFrame:
    """Signed mean error (%) of the GEMM operators (qkv, o, gate_up, down; all cells and roles) of the plain and
    the refined roofline, per GPU and pricer (rows) and token band of M (columns)."""
    o = ops[ops["pricer"].isin(["roofline", "refined"])]
    gemm = o[o["group"].isin(GEMM_GROUPS[:4])]
    band = pd.cut(
        gemm["num_tokens"],
        _BANDS,
        labels=[f"{a + 1}-{b}" if b < 1 << 30 else f">{a}" for a, b in itertools.pairwise(_BANDS)],
    )
    return (gemm.groupby(["gpu", "pricer", band], observed=True)["rel_error"].mean() * 100).unstack(2)


def short_attention_errors(ops: pd.DataFrame) -> pd.DataFrame:
    """Attention calls measured under 20 us (attention profiles) of the plain and the refined roofline: per GPU and
    pricer, the count and the signed mean error (%)."""
    o = ops[ops["pricer"].isin(["roofline", "refined"])]
    att = o[o["group"].str.startswith("attention") & (o["measured_s"] < 20e-6) & (o["probe"] != "tokens")]
    a = (
        att.groupby(["gpu", "pricer"])["rel_error"]
        .agg(["size", "mean"])
        .rename(columns={"size": "attention calls < 20 us", "mean": "signed mean error %"})
    )
    a["signed mean error %"] *= 100
    return a
