"""The validation report rendered: Markdown (images as files beside it) and a self-contained HTML page.

What it shows is computed elsewhere and handed in: the summary (:mod:`validation.report.data`, the end-to-end
headline of :mod:`validation.report.headline`), the error tables, the figures (:mod:`validation.report.figures`,
helpers take an ``ax``). Functions here turn data into text; nothing here computes a figure of merit.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from validation.calibration.data import SPLIT, mape_table
from validation.calibration.settings import FIT_EXCLUDE
from validation.catalog import PACKAGED, Catalog
from validation.components import diagnostics
from validation.components import profiles as C
from validation.protocol.render import render_protocol_markdown
from validation.protocol.rules import PRICERS
from validation.report import data as D
from validation.report.e2e import (
    e2e_sections,
    inference_perf_cells_section,
    inference_perf_section,
    llmperf_section,
    profiled_section,
    split_sections,
)
from validation.report.figures import figures
from validation.report.headline import not_simulated, summarise
from validation.report.tables import md as _md


def _best(mape_by_pricer: dict[str, float]) -> str:
    """``"MAPE (pricer): verdict"`` of the lowest validation MAPE among the roofline, refined and table pricers."""
    best = min(
        ((v, pr) for pr, v in mape_by_pricer.items() if pr in ("roofline", "refined", "table") and np.isfinite(v)),
        default=None,
    )
    if best is None:  # a GPU whose every component cell calibrates (validation.protocol.rules): nothing to judge
        return "no validation cell"
    return f"{best[0]:.2f} ({best[1]}): " + _verdict(best[0], D.TARGETS["component_validation_mape_pct"])


def _pricer_sections(
    s: dict[str, Any], pricers: pd.DataFrame, pricer_ops: pd.DataFrame, catalog: Catalog
) -> tuple[str, list[tuple[str, str]]]:
    """(headline lines, sections) of the pricer comparison."""
    if not s.get("pricer_component_mape_pct"):
        return "", []
    return "\n".join(_pricer_head(s)), _pricer_body(s, pricers, pricer_ops, catalog)


def _pricer_head(s: dict[str, Any]) -> list[str]:
    """The pricer comparison's headline lines: component MAPE per GPU and pricer, the validation points split as
    the target is worded, and the end-to-end cells replayed with every pricer."""
    pc = s["pricer_component_mape_pct"]
    rows = []
    for g, d in pc.items():
        row: dict[str, Any] = {"gpu": g}
        for pr in D.PRICER_ORDER:
            for r in ("calibration", "validation"):
                row[f"{pr} {r[:3]}. %"] = d.get(pr, {}).get(r, float("nan"))
        row["table fidelity % (in-cell, not validation)"] = d.get("table", {}).get("fidelity", float("nan"))
        row["best val. (pricer)"] = _best({pr: v.get("validation", float("nan")) for pr, v in d.items()})
        rows.append(row)
    head = [
        f"- Component MAPE per GPU by pricer (same points and metrics as above; every pricer judged on the "
        f"validation cells of validation/protocol/constants.py, none of which fitted or chose anything; the table's "
        f"in-cell interpolation is its fidelity, not validation):\n\n{_md(pd.DataFrame(rows))}\n"
    ]
    parts = []
    for g, d in s.get("pricer_component_parts_mape_pct", {}).items():
        ar = {pr: v["all_reduce"] for pr, v in d.items() if v["all_reduce_n"]}
        parts.append(
            {
                "gpu": g,
                "best val. iteration components % (pricer)": _best(
                    {pr: v["iteration_components"] for pr, v in d.items()}
                ),
                "val. all-reduce % (table / refined / roofline)": " / ".join(
                    f"{ar[pr]:.1f}" for pr in ("table", "refined", "roofline") if pr in ar
                ),
            }
        )
    if parts:
        head.append(
            '- The same validation points split as the target is worded ("prefill and decode iteration times '
            'vs tokens, batch and context": layer time, attention, LM head), with the all-reduce curves '
            "(time vs message size) apart: every pricer on the 4-GPU curve, a validation cell (the rooflines "
            "fitted on the 2- and 8-GPU curves; the table prices it by its fallback, since no table of a "
            "validation curve is shipped); the table above counts both:\n\n"
            f"{_md(pd.DataFrame(parts))}\n"
        )
    t = D.TARGETS["vllm_run_mean_pct"]
    for pr, v in s.get("pricer_vllm_run_pct", {}).items():
        head.append(
            f"- RTX 4090 vLLM run with the {pr} pricer: "
            + ", ".join(f"{m} {x:+.1f}% ({_verdict(x, t)})" for m, x in v.items())
        )
    lp = s.get("pricer_llmperf_rtx3090_bf16_throughput_pct", {})
    if lp:
        head.append(
            "- LLMPerf RTX 3090 BF16 output throughput by pricer: "
            + ", ".join(f"{pr} {v:+.1f}%" for pr, v in lp.items())
            + " (fixed by construction under the reconstructed client's "
            "launch spread: shown, not judged)"
        )
    sw = s.get("pricer_splitwise_mape_pct", {})
    if sw:
        head.append(
            "- Splitwise whole-model iterations by pricer, MAPE % prefill / decode: "
            + "; ".join(
                f"{g}: "
                + ", ".join(
                    f"{pr} {v['prefill_iteration_s']:.1f} / {v['decode_iteration_s']:.1f}" for pr, v in d.items()
                )
                for g, d in sw.items()
            )
            + " (the table: the Vidur profile of the same GPU, model and TP; no kernel-level pricer sees that "
            "engine's per-iteration floor)"
        )
    return head


def _pricer_body(
    s: dict[str, Any], pricers: pd.DataFrame, pricer_ops: pd.DataFrame, catalog: Catalog
) -> list[tuple[str, str]]:
    """The pricer comparison's sections: the pricers and their protocols, where the component error comes from,
    the operator errors, the prefill-attention forms, the table pricer's limits and the refined parameters."""
    secs = [
        (
            "Pricers and their validation protocols",
            "\n".join(f"- **{k}**: {v}" for k, v in PRICERS.items())
            + "\n- The simulator runs the **roofline** unless given another pricer (``simulate(perf=...)``); "
            "the refined roofline's parameters are in catalog/roofline.toml, the tables `agentreplay calibrate` "
            "ships in catalog/tables.toml: those of the calibration cells only (TP=1 profile cells, the 2- and "
            "8-GPU all-reduce curves); a TP>1 deployment scales the TP=1 table, exactly as judged here."
            "\n- Every pricer prices a mixed prefill + decode iteration's attention as the one FlashAttention-2 "
            "kernel vLLM runs where the tile form is on (RTX 4090, RTX PRO 6000, L40S; ``[hardware] "
            'mixed_attention = "one_kernel"``, the default); **KIND:apart** is KIND with the two parts priced '
            "apart, shown for the end-to-end cells on those GPUs (``python benchmarks/attention_mixed.py`` "
            "compares both on the profiles' mixed shots).",
        )
    ]
    diag = D.error_shares(pricers)
    lines = [
        "Validation points per GPU and metric: MAPE and the metric's share of the GPU's summed absolute error "
        "(what the per-GPU MAPE is made of).",
        "",
        _md(diag),
        "",
    ]
    for g, d in diag.groupby("gpu") if len(diag) else ():  # none: every component cell calibrates
        top = d.sort_values("refined share %", ascending=False).iloc[0]
        lines.append(
            f"- {g}: the refined roofline's largest contributor is {top['metric']} "
            f"({top['refined share %']:.0f}% of its absolute error, MAPE {top['refined MAPE %']:.1f}% over "
            f"{int(top['refined n'])} points); the table's MAPE on it is {top['table MAPE %']:.1f}%."
        )
    if len(pricer_ops):
        lines += ["", _residual_shapes(pricer_ops)]
    secs.append(("Where the component error comes from", "\n".join(lines)))
    if len(pricer_ops):
        t = D.operator_errors_by_pricer(pricer_ops)
        secs.append(
            ("Operator error by pricer (MAPE %, per GPU and operator group)", _md(t.round(1).reset_index(), ".1f"))
        )
    if s.get("prefill_forms"):
        secs.append(
            (
                "Prefill attention: FLOP form and FlashAttention-2 tile form",
                (
                    "Where vLLM's FlashAttention-2 prefill was profiled (Ampere, Ada and consumer "
                    "Blackwell GPUs), both "
                    "rooflines price prefill attention by the critical path of the kernel's CTAs "
                    "(agentreplay.perf.tiles: "
                    "64 x kBlockN tiles from the kernel's source, one CTA per (query block, sequence, "
                    "head), as many at "
                    "once as the SMs' shared memory holds) instead of by its FLOPs. The refined roofline "
                    "fitted in both "
                    "forms on the calibration split alone; MAPE on the prefill-attention points of each "
                    "GPU fitted in the "
                    "tile form:\n\n"
                )
                + _md(pd.DataFrame(s["prefill_forms"]), ".2f"),
            )
        )
    lim = diagnostics.limits_markdown(s, _md)
    if lim:
        secs.append(("Limits of the table pricer", lim))
    ref = D.refinement_table(catalog)
    if len(ref):
        secs.append(
            (
                "Refined roofline parameters (catalog/roofline.toml)",
                "Fitted on the calibration split only "
                "(validation/calibration/settings.py REFINED_STAGES); empty = not fitted (catalog value or "
                "plain-roofline "
                "default).\n\n" + _md(ref, ".4g"),
            )
        )
    return secs


def _residual_shapes(ops: pd.DataFrame) -> str:
    """The misfit shapes behind the refinements: signed mean GEMM error by token band (one efficiency per GPU
    over-prices small and large M and under-prices the ridge), and attention calls under 20 us."""
    t, a = D.gemm_error_bands(ops), D.short_attention_errors(ops)
    return (
        "GEMM operators (qkv, o, gate_up, down; all cells and roles): signed mean error % by token count "
        "M. The plain roofline's pattern (too slow at small and large M, too fast near the ridge point) is "
        "what one constant efficiency per GPU gives; the refined roofline's M_half saturation and GEMM launch "
        "cost flatten it.\n\n" + _md(t.round(1).reset_index(), ".1f") + "\n\nShort attention calls "
        "(measured < 20 us, attention profiles): signed mean error; the plain roofline has no fixed cost per "
        "attention kernel beyond the shared per-kernel overhead.\n\n" + _md(a.round(1).reset_index(), ".1f")
    )


def _verdict(err_pct: float, target: float) -> str:
    if not np.isfinite(err_pct):
        return "n/a"
    return "met" if abs(err_pct) <= target else f"missed by {abs(err_pct) - target:.1f} pp"


# ---------------------------------------------------------------------------------------------- text
def _sections(
    df: pd.DataFrame,
    ops: pd.DataFrame,
    agg: dict[str, pd.DataFrame],
    s: dict[str, Any],
    quick: bool,
    pricers: pd.DataFrame | None = None,
    pricer_ops: pd.DataFrame | None = None,
    catalog: Catalog = PACKAGED,
) -> list[tuple[str, str]]:
    comp = s["component_mape_pct"]
    rows = [
        {
            "gpu": g,
            "calibration MAPE %": v["calibration"],
            "validation MAPE %": v["validation"],
            "val. layer time %": v["validation_layer_time"],
            "val. attention %": v["validation_attention"],
            "val. time-weighted %": v["validation_time_weighted"],
            "target %": D.TARGETS["component_validation_mape_pct"],
            "verdict": _verdict(v["validation"], D.TARGETS["component_validation_mape_pct"]),
        }
        for g, v in comp.items()
    ]
    head = [
        "- Component cells (layer time, attention, lm_head, all-reduce), MAPE per GPU and role, with the "
        "simulator's default pricer (the plain roofline; every pricer in the next table, whose last column is "
        "the verdict per GPU); the time-weighted column is sum(|error| x measured) / sum(measured) over the "
        "validation points:\n\n"
        f"{_md(pd.DataFrame(rows))}\n"
    ]
    if s.get("splitwise_mape_pct"):
        sw = pd.DataFrame([{"gpu": g, **{f"{m} %": v[m] for m in v}} for g, v in s["splitwise_mape_pct"].items()])
        scaling = "; ".join(
            f"{g}: " + ", ".join(f"TP{tp} {v['measured']:.1f} vs {v['simulated']:.1f}" for tp, v in sorted(d.items()))
            for g, d in s.get("splitwise_decode_batch1_ms", {}).items()
        )
        head.append(
            f"- Splitwise whole-model iterations (validation only):\n\n{_md(sw)}\n\n  Decode iteration "
            f"at batch 1, median measured vs simulated ms: {scaling}. The measured iteration hardly shrinks "
            "with TP while weight streaming per GPU does: a per-iteration floor of that engine that isolated "
            "kernel profiles (the calibration data) cannot show.\n"
        )
    p_head, p_secs = _pricer_sections(
        s,
        pricers if pricers is not None else pd.DataFrame(),
        pricer_ops if pricer_ops is not None else pd.DataFrame(),
        catalog,
    )
    if p_head:
        head.insert(1 + bool(s.get("splitwise_mape_pct")), p_head)
    prov = D.gpu_provenance(df, catalog)
    borrowed = prov[prov["borrowed from"] != ""]
    if len(borrowed):
        head.append(
            "- GPUs without any measured profile ("
            + ", ".join(f"{g} from {src}" for g, src in zip(borrowed["gpu"], borrowed["borrowed from"], strict=True))
            + "): datasheet peaks with the efficiencies of the nearest profiled GPU; no measured cell judges them, "
            "so no error figure exists for them (see 'Where each GPU's parameters come from')."
        )
    secs = [("Component figures", "\n".join(head))]
    if s.get("protocol"):  # the split, the constants' provenance, LOGO / LOMO, table fidelity
        secs += split_sections(render_protocol_markdown(s))
    secs.append(
        (
            "Calibration / validation split",
            "\n".join(f"- **{k}**: {v}" for k, v in SPLIT.items())
            + (
                "\n- Operators compared but not fitted: "
                + ", ".join(sorted({g for _, g in FIT_EXCLUDE}))
                + " of HF-eager (LLMServingSim v0) profiles (unfused kernels; see "
                + "validation/calibration/settings.py FIT_EXCLUDE)."
                + "\n- Source operators not compared: "
                + "; ".join(f"{op} ({why})" for op, why in sorted(C.NOT_MAPPED.items()))
                + "."
                f"\n- Deterministic subsampling: at most {C.MAX_POINTS} log-spaced token counts per operator curve and "
                f"{2 * C.MAX_POINTS} evenly spaced points per attention curve; Splitwise repeats and "
                "profile repeats are "
                "reduced to their median." + ("\n- --quick: the agent-JCT replay was skipped." if quick else "")
            ),
        )
    )
    secs.append(
        (
            "Where each GPU's parameters come from",
            "Datasheet peaks from catalog/gpus.toml (each value's "
            "source is commented there); efficiencies fitted by `agentreplay calibrate` on the GPU's own "
            "calibration points (catalog/calibration.json), or, for a GPU without any measured profile, the "
            "kernel-level efficiencies of the nearest profiled GPU of its class (validation/calibration/settings.py "
            "NEAREST). Operator points: the GPU's operator-profile points by role in calibration.json; "
            "measured cells: the cells of this report on that GPU.\n\n" + _md(prov, ".4g"),
        )
    )
    secs += p_secs
    if len(ops) and not p_secs:
        t = mape_table(ops).round(1).reset_index()
        secs.append(("Operator fit error (MAPE %, per GPU and operator group)", _md(t, ".1f")))
    secs.append(("Aggregates: MAPE per source", _md(agg["source"])))
    secs.append(("Aggregates: MAPE per metric", _md(agg["metric"])))
    sk = pd.DataFrame(s.get("skipped", []))
    if len(sk):
        sk = sk[~sk["cell_id"].isin(not_simulated(s.get("skipped", []))["cell_id"])]
    secs.append(("Component cells not compared", _md(sk)))
    return secs


def _img(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write(
    out: Path,
    df: pd.DataFrame,
    ops: pd.DataFrame,
    dists: dict[str, dict[str, Any]],
    agg: dict[str, pd.DataFrame],
    summary: dict[str, Any],
    *,
    quick: bool = False,
    pricers: pd.DataFrame | None = None,
    pricer_ops: pd.DataFrame | None = None,
    catalog: Catalog = PACKAGED,
    sensitivity: pd.DataFrame | None = None,
    inference_perf_peers: pd.DataFrame | None = None,
) -> None:
    """report.md (images as files beside it) and report.html (images embedded as base64 PNG).
    ``inference_perf_peers``: :func:`validation.e2e.peers.peer_table` (as ``inference_perf_peers.parquet``)."""
    files = figures(out, df, dists)
    e2e = e2e_sections(summary, df)
    secs = (
        e2e[:1]
        + inference_perf_section(summary)
        + profiled_section(summary)
        + e2e[1:]
        + llmperf_section(summary, sensitivity)
        + _sections(df, ops, agg, summary, quick, pricers, pricer_ops, catalog)
    )
    n = df.groupby("role").size().to_dict()
    intro = (
        f"Simulated vs measured, {len(df):,} comparisons ({n.get('calibration', 0):,} calibration, "
        f"{n.get('validation', 0):,} validation) over {df['cell_id'].nunique()} cells. Signed error = "
        "simulated / measured - 1; MAPE = mean |error|. Data: errors.parquet (one row per cell, metric and "
        "operating point), component_ops.parquet (operator-level fit diagnostics), pricers.parquet and "
        "pricer_ops.parquet (the pricer comparison)."
    )
    line = (summary.get("end_to_end") or summarise(df, summary.get("skipped", [])))["line"]
    md = ["# agentreplay validation report", "", f"**{line}.**", "", intro, ""]
    secs += inference_perf_cells_section(inference_perf_peers if inference_perf_peers is not None else pd.DataFrame())
    for title, body in secs:
        md += [f"## {title}", "", body, ""]
    md += ["## Figures", ""] + [f"![{f}]({f})" for f in files]
    tmp = out / ".report.md.tmp"
    tmp.write_text("\n".join(md) + "\n")
    os.replace(tmp, out / "report.md")
    html = [
        "<!doctype html><html><head><meta charset='utf-8'><title>agentreplay validation</title><style>",
        "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}</style></head><body>",
        "<h1>agentreplay validation report</h1>",
        f"<p><b>{line}.</b></p>",
        f"<p>{intro}</p>",
    ]
    for title, body in secs:
        html.append(f"<h2>{title}</h2>" + _md_to_html(body))
    html.append("<h2>Figures</h2>")
    html += [f"<h3>{f}</h3><img alt='{f}' src='data:image/png;base64,{_img(out / f)}'>" for f in files]
    html.append("</body></html>")
    tmp = out / ".report.html.tmp"
    tmp.write_text("\n".join(html) + "\n")
    os.replace(tmp, out / "report.html")


def _md_to_html(body: str) -> str:
    """Minimal conversion of what :func:`_sections` emits: pipe tables and '- ' bullets; the rest as <p>."""
    out, table, items = [], [], []

    def flush() -> None:
        if items:
            out.append("<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>")
            items.clear()
        if table:
            rows = [r.strip().strip("|").split("|") for r in table if not set(r.strip()) <= set("|:- ")]
            cells = [
                f"<tr>{''.join(f'<t{x}>{c.strip()}</t{x}>' for c in r)}</tr>"
                for r, x in zip(rows, ["h"] + ["d"] * (len(rows) - 1), strict=True)
            ]
            out.append("<table>" + "".join(cells) + "</table>")
            table.clear()

    for line in body.splitlines():
        s = line.strip()
        if s.startswith("|"):
            if items:
                flush()
            table.append(s)
            continue
        if table:
            flush()
        if s.startswith("- "):
            items.append(s[2:].replace("**", ""))
        elif s:
            flush()
            out.append(f"<p>{s}</p>")
    flush()
    return "\n".join(out)
