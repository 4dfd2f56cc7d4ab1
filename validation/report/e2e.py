"""The end-to-end sections of the validation report: the headline (:mod:`validation.report.headline`) rendered, the
stand-in cells apart, the cells not simulated, and what the LLMPerf runs do not record."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from validation.report import headline as H
from validation.report.tables import md as _md


def llmperf_section(s: dict[str, Any], sensitivity: pd.DataFrame | None) -> list[tuple[str, str]]:
    """What the LLMPerf runs record and what they do not: the compute-floor checks and the replay's sensitivity
    to each unrecorded engine setting (validation.e2e.llmperf.llmperf_sensitivity)."""
    lines = []
    fl = s.get("llmperf_ttft_below_compute_floor")
    if fl:
        lines.append(
            f"- TTFT check: in {fl['below']} of {fl['cells']} simulated LLMPerf cells the measured mean TTFT "
            "is below the time a prefill of the mean prompt takes at the GPU's datasheet peak, so the "
            "measured TTFT cannot include a full prefill of prompts that size (prefix-cache hits, e.g. a "
            "cache warm from the previous identical run, or a client-side TTFT definition)."
        )
    share = s.get("llmperf_run_floor_share_pct")
    if share:
        lines.append(
            "- Whole-run check: the linear-layer FLOPs of every prompt and output token of a run, at the "
            "GPU's datasheet peak (bf16 on Ampere, where fp8 weights compute in bf16), take this share of "
            "the measured span: "
            + "; ".join(f"{k}: {v['min']:.0f}-{v['max']:.0f}% ({v['cells']} runs)" for k, v in share.items())
            + ". Serving sustains well below the peak, so a share near 100% says the run had more compute "
            "or less work (cache hits) than the one GPU the cell records."
        )
    if sensitivity is not None and len(sensitivity) and "metric" in sensitivity:
        d = sensitivity[
            sensitivity["metric"].isin(("ttft_mean_s", "itl_mean_s", "e2e_mean_s", "throughput_output_tok_s"))
        ]
        t = (
            d.assign(err=d["rel_error"] * 100, gd=d["gpu"] + " " + d["dtype"])
            .pivot_table(index=["gd", "setting", "value"], columns="metric", values="err", aggfunc="mean", sort=False)
            .reset_index()
            .rename(columns={"gd": "GPU dtype"})
        )
        runs = d.groupby(d["gpu"] + " " + d["dtype"])["cell_id"].nunique().to_dict()
        lines.append(
            "- Sensitivity to what the runs do not record: mean signed error (%) over the runs ("
            + ", ".join(f"{k}: {v} runs" for k, v in runs.items())
            + ") with each setting at 2-3 plausible "
            "values, the others at the replay's defaults (first value of each setting). The spread says how "
            "much of each miss an unrecorded setting could explain; none of these values is chosen by "
            "the error (these are validation cells).\n\n" + _md(t, ".1f")
        )
    return [("End to end: the LLMPerf runs, what they record and what they do not", "\n".join(lines))] if lines else []


def split_sections(lines: list[str]) -> list[tuple[str, str]]:
    """Markdown lines with ``## `` headings -> (title, body) sections."""
    out: list[tuple[str, list[str]]] = []
    for ln in lines:
        if ln.startswith("## "):
            out.append((ln[3:].strip(), []))
        elif out:
            out[-1][1].append(ln)
    return [(t, "\n".join(b).strip()) for t, b in out]


def e2e_sections(s: dict[str, Any], df: pd.DataFrame) -> list[tuple[str, str]]:
    """The end-to-end headline (:mod:`validation.report.headline`): cell verdicts, every cell and metric (misses first),
    group MAPE, the stand-in cells apart, the cells not simulated."""
    h = s.get("end_to_end") or H.summarise(df, s.get("skipped", []))
    table = H.e2e_table(df)
    cells = pd.DataFrame(h["cells_table"])
    body = [
        f"**{h['line']}.** {h['metrics_met']} of {h['metrics_judged']} judged metrics met; "
        f"{h['metrics_not_judged']} not judged (fixed by construction, listed with their error). Target: "
        f"|signed error| <= {h['target_pct']:.0f}% for every metric (a Splitwise cell: MAPE over its measured "
        "iterations); a cell is within target when every judged metric is. Rules: validation/report/headline.py.",
        "",
    ]
    if len(cells):
        c = cells[cells["workload"] == "measured"].assign(
            verdict=lambda d: np.where(d["within_target"], "within target", "missed"),
            **{"worst judged error %": lambda d: d["worst_error_pct"]},
        )
        body += [
            "Cells, misses first (measured workloads):",
            "",
            _md(
                c[
                    [
                        "source",
                        "cell_id",
                        "gpu",
                        "dtype",
                        "metrics",
                        "met",
                        "worst_metric",
                        "worst judged error %",
                        "verdict",
                    ]
                ].rename(columns={"metrics": "judged metrics"}),
                ".1f",
            ),
            "",
        ]
    groups = pd.DataFrame(h["groups"])
    secs = [("End to end: the headline", "\n".join(body))]
    if len(groups):
        secs.append(
            (
                "End to end: MAPE per source and metric family (judged metrics)",
                _md(groups.rename(columns={"mape_pct": "MAPE %", "mean_signed_pct": "mean signed %"}), ".1f"),
            )
        )
    if len(table):
        m = table[table["workload"] == "measured"]
        cols = ["cell_id", "metric", "statistic", "measured", "simulated", "error_pct", "verdict"]
        secs.append(
            (
                "End to end: every cell and metric, misses first",
                _md(m[cols].rename(columns={"error_pct": "error %"}), ".4g"),
            )
        )
        st = table[table["workload"] == "stand-in"]
        if len(st):
            secs.append(
                (
                    "End to end, reported apart: stand-in workloads (never averaged with the rest)",
                    "These cells replay trajectories that are not the measured run's own; their errors say "
                    "how different the workloads are as much as how good the simulator is.\n\n"
                    + _md(st[cols].rename(columns={"error_pct": "error %"}), ".4g")
                    + "\n\n"
                    + "\n".join(
                        f"- `{c}`: {n}"
                        for c, n in st.drop_duplicates("cell_id")[["cell_id", "note"]].itertuples(index=False)
                    ),
                )
            )
        notes = table.drop_duplicates("cell_id")[["cell_id", "note"]]
        secs.append(
            ("End-to-end replay notes", "\n".join(f"- `{c}`: {n}" for c, n in notes.itertuples(index=False) if n))
        )
    ns = H.not_simulated(s.get("skipped", []))
    secs.append(("End-to-end cells not simulated", _md(ns) if len(ns) else "(none)"))
    return secs


def inference_perf_section(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The H100 vLLM inference-perf runs: targets (misses first), per configuration in sample / out of
    configuration / best peer, every simulator's MAPE on the same cells, the runs reported apart."""
    ip = s.get("inference_perf")
    if not ip:
        return []
    t = pd.DataFrame(ip["targets"])
    conf = pd.DataFrame(ip["per_configuration"])
    peers = pd.DataFrame(ip["peers_summary"])
    apart = pd.DataFrame(ip["apart"])
    body = [
        f"{ip['runs']} replayable inference-perf runs (vLLM serving runs driven by inference-perf), each "
        "replayed with its client (shared-prefix prompt pool, constant-rate stages, exactly O output tokens) and "
        "its deployment. Headline: **out of configuration**: every stage cell simulated with the engine cost "
        "fitted without its (GPU, model, TP) configuration (validation/e2e/inference_perf_fit.py, "
        "catalog/engine_cost.json); "
        "the in-sample fit beside it, labelled. Per-token time = (E2E - TTFT) / (O - 1), the sources' itl_mean. "
        "MAPE over the stage cells; misses first.",
        "",
        _md(t, ".2f") if len(t) else "(no replayable cell)",
        "",
    ]
    if len(conf):
        body += ["Per configuration and metric (stage cells):", "", _md(conf, ".2f"), ""]
    if len(peers):
        body += [
            "Every simulator on the same cells and metrics (the peers' predictions are the inference-sim "
            "error tables'; LLMServingSim was scored on each run's first 300 requests, so its rows are the "
            "`first300` cells, which we replay the same way; stage and whole-run cells for the rest):",
            "",
            _md(peers.sort_values(["metric", "MAPE %"]), ".2f"),
            "",
            "Per cell and metric: inference_perf_peers.parquet.",
            "",
        ]
    if len(apart):
        body += [
            f"Reported apart, not averaged in ({len(apart)} cells):",
            "",
            _md(apart),
        ]
    return [("End to end: H100 vLLM inference-perf runs beside the peers", "\n".join(body))]


def profiled_section(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Each vllm-run cell priced from its deployment profile and as an unprofiled GPU (DESIGN §5)."""
    reg = pd.DataFrame(s.get("profiled_regimes") or [])
    if not len(reg) or "metric" not in reg:
        return []
    reg = reg[reg["metric"].notna()]
    t = reg.assign(**{"error %": reg["rel_error"] * 100}).pivot_table(
        index=["cell_id", "metric"], columns="pricer", values="error %"
    )
    worst = reg.groupby("pricer")["rel_error"].apply(lambda v: float(np.max(np.abs(v))) * 100)
    body = [
        "Measured vLLM runs with per-request timestamps, priced two ways: `profiled` (`--perf auto`: the "
        "per-layer profile of exactly this GPU, model, dtype and TP, TP collectives added once) and `roofline "
        "(unprofiled)` (the roofline with the parameters the GPU would have without its own profile: the donor "
        "GPU's). Target for the profiled regime: every metric within 3%. Worst |error| per regime: "
        + ", ".join(f"{k} {v:.1f}%" for k, v in worst.items())
        + ".",
        "",
        _md(t.reset_index(), ".2f"),
    ]
    return [("End to end: profiled and unprofiled regimes", "\n".join(body))]


def inference_perf_cells_section(peers: pd.DataFrame) -> list[tuple[str, str]]:
    """Every inference-perf cell and metric: our signed error (out of configuration, in sample) beside each peer's."""
    if not len(peers):
        return []
    t = peers.drop(columns=["configuration", "stage_cell"], errors="ignore")
    t = t.assign(cell=t["cell_id"].str.removeprefix("inference-perf/")).drop(columns="cell_id")
    cols = ["cell", "metric", "measured", *[c for c in t.columns if c not in ("cell", "metric", "measured")]]
    body = (
        "Signed error % = simulated / measured - 1; empty where that simulator has no prediction of the cell "
        "(inference_perf_peers.parquet holds the same table).\n\n" + _md(t[cols].sort_values(["cell", "metric"]), ".2f")
    )
    return [("inference-perf runs: every cell, ours beside each peer", body)]
