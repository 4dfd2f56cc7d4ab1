"""The validation protocol rendered as Markdown (the report's protocol section): the split, the constants with
their provenance and CV scores, the leave-one-GPU-out / leave-one-model-out errors, and the table fidelity. What it
renders is declared in :mod:`validation.protocol.rules` and computed in :mod:`validation.protocol.crossval`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from validation.protocol.rules import CALIBRATION, NEAREST_RULE, VALIDATION


def render_table(rows: list[dict[str, Any]], columns: Iterable[str]) -> list[str]:
    """A pipe table (no tabulate dependency); floats with 4 significant digits."""
    cols = list(columns)

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:.4g}"
        return str(v).replace("|", "/")

    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    out += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return out


def _pct(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def _render_e2e_out_of_cell(d: Mapping[str, Any] | None) -> list[str]:
    """The end-to-end leave-one-GPU-out / leave-one-model-out table (:mod:`validation.e2e.out_of_cell`)."""
    if not d:
        return ["End to end out of cell: not computed in this run (validate --quick skips it).", ""]
    out = [
        "End to end out of cell (validation/e2e/out_of_cell.py): each simulated end-to-end run (vLLM run, "
        "LLMPerf) replayed with its GPU priced as shipped, as if the GPU had no profile (LOGO: the donor's "
        "kernel-level parameters, the rest at [defaults.efficiency]) and as if its model had no profile on that "
        "GPU (LOMO: the GPU refitted on its other models). MAPE % of the judged metrics per metric family; "
        "every cell is a validation cell, nothing is chosen from these rows.",
        "",
    ]
    rows = [
        {**r, "shipped": _pct(r.get("shipped")), "LOGO": _pct(r.get("logo")), "LOMO": _pct(r.get("lomo"))}
        for r in d.get("table", [])
    ]
    out += [*render_table(rows, ("gpu", "dtype", "family", "cells", "shipped", "LOGO", "LOMO")), ""]
    if d.get("donors"):
        out.append("LOGO donors: " + ", ".join(f"{g} <- {x}" for g, x in d["donors"].items()) + ".")
    out += [f"- not replayed: {n}" for n in d.get("not_replayed", [])]
    out.append("")
    return out


def render_protocol_markdown(summary: Mapping[str, Any]) -> list[str]:
    """Markdown lines of the protocol's four sections, from ``summary["protocol"]`` (or that entry itself): the
    split, the constants with their provenance (and the CV scores), the leave-one-GPU-out / leave-one-model-out
    errors, and the table fidelity."""
    p = summary.get("protocol", summary)
    out = [
        "## Validation protocol",
        "",
        "Declared in validation/protocol/constants.py. A cell (profile cell: source, GPU, model, dtype, TP; an "
        "all-reduce "
        "curve; a Splitwise cell; a measured run) is calibration or validation as a whole, for every pricer.",
        "",
    ]
    out += [f"- **{k}**: {v}" for k, v in p.get("split", {}).items()]
    cells = p.get("cells", {})
    if cells:
        out += [
            f"- Component cells: {len(cells.get(CALIBRATION, []))} calibration, "
            f"{len(cells.get(VALIDATION, []))} validation. The RTX 4090's only profile cell calibrates whole: "
            "its out-of-profile error is the leave-one-GPU-out row below, its validation the vLLM run."
        ]
    out += ["", "## Constants and where they come from", ""]
    consts = p.get("constants", [])
    counts: dict[str, int] = {}
    for r in consts:
        counts[r["provenance"]] = counts.get(r["provenance"], 0) + 1
    out.append(
        "Every tunable of the pricers and the memory model: "
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        + ". Datasheet peaks are cited beside each value in "
        "gpus.toml. Global constants:"
    )
    out += [
        "",
        *render_table(
            [
                r
                for r in consts
                if r["scope"]
                in ("table pricer", "memory model", "catalog", "refined roofline", "calibration", "protocol")
            ],
            ("constant", "scope", "value", "provenance", "detail"),
        ),
        "",
    ]
    cv = p.get("cv_scores", [])
    if cv:
        out += [
            "Cross-validation inside the calibration cells (validation/protocol/crossval.py; no validation cell read):",
            "",
            *render_table(cv, ("tunable", "candidate", "folds", "points", "cv_score_pct", "chosen")),
            "",
        ]
    per_gpu: dict[str, dict[str, list[str]]] = {}
    for r in consts:
        if r["provenance"] == "datasheet" or r["scope"] in (
            "table pricer",
            "memory model",
            "catalog",
            "refined roofline",
            "calibration",
            "protocol",
        ):
            continue
        d = per_gpu.setdefault(r["scope"], {})
        reason = (
            ""
            if r["provenance"] in ("fitted", "borrowed") or r["detail"].startswith("[defaults")
            else f" ({r['detail']})"
        )
        key = "defaults" if r["detail"].startswith("[defaults") else r["provenance"]
        d.setdefault(key, []).append(f"{r['constant']} = {r['value']}{reason}")
    rows = [
        {
            "gpu": g,
            "fitted (its calibration cells)": "; ".join(d.get("fitted", [])),
            "borrowed (nearest profiled GPU)": "; ".join(d.get("borrowed", [])),
            "hand-set (reason)": "; ".join(d.get("hand-set", [])),
            "[defaults.efficiency]": "; ".join(d.get("defaults", [])),
        }
        for g, d in sorted(per_gpu.items())
    ]
    out += [
        "Per GPU (plain roofline: gpus.toml; refined: roofline.toml, prefixed `refined.`; the cells each fit "
        "used are listed in constants.parquet):",
        "",
    ]
    out += [
        *render_table(
            rows,
            (
                "gpu",
                "fitted (its calibration cells)",
                "borrowed (nearest profiled GPU)",
                "hand-set (reason)",
                "[defaults.efficiency]",
            ),
        ),
        "",
    ]
    out += [
        "## Out-of-cell errors: leave-one-GPU-out / leave-one-model-out",
        "",
        f"Leave-one-GPU-out: each profiled GPU priced with the kernel-level parameters of the GPU the "
        f"catalogue's rule picks among the other profiled GPUs ({p.get('nearest_rule', NEAREST_RULE)}), on "
        "its own datasheet peaks, the rest at [defaults.efficiency]; judged on every cell of the GPU (all TP, "
        "both roles). What to expect for a GPU without a profile. MAPE %:",
        "",
    ]
    logo = [
        {
            **r,
            "components LOGO": _pct(r.get("logo_components_mape_pct")),
            "components own fit": _pct(r.get("own_components_mape_pct")),
            "Splitwise LOGO / own": f"{_pct(r.get('logo_splitwise_mape_pct'))} / "
            f"{_pct(r.get('own_splitwise_mape_pct'))}"
            if r.get("logo_splitwise_n")
            else "",
            "all-reduce LOGO / own": f"{_pct(r.get('logo_all_reduce_mape_pct'))} / "
            f"{_pct(r.get('own_all_reduce_mape_pct'))}"
            if r.get("logo_all_reduce_n")
            else "",
        }
        for r in p.get("logo", [])
    ]
    out += [
        *render_table(
            logo,
            (
                "gpu",
                "pricer",
                "donor",
                "logo_components_n",
                "components LOGO",
                "components own fit",
                "Splitwise LOGO / own",
                "all-reduce LOGO / own",
            ),
        ),
        "",
    ]
    lomo = p.get("lomo", [])
    if lomo:
        out += [
            "Leave-one-model-out: each GPU refitted on its calibration cells of the other models only, judged "
            "on every cell of the held-out model (all TP; Splitwise where the model has it). What to expect "
            "for a model without a profile on a profiled GPU. 'leaked': parameters the refit could not fit "
            "(they keep the shipped value). MAPE %:",
            "",
        ]
        rows = [
            {
                **r,
                "components LOMO": _pct(r.get("lomo_components_mape_pct")),
                "components own fit": _pct(r.get("own_components_mape_pct")),
                "Splitwise LOMO / own": f"{_pct(r.get('lomo_splitwise_mape_pct'))} / "
                f"{_pct(r.get('own_splitwise_mape_pct'))}"
                if r.get("lomo_splitwise_n")
                else "",
            }
            for r in lomo
        ]
        out += [
            *render_table(
                rows,
                (
                    "gpu",
                    "model",
                    "pricer",
                    "cells",
                    "lomo_components_n",
                    "components LOMO",
                    "components own fit",
                    "Splitwise LOMO / own",
                    "leaked",
                ),
            ),
            "",
        ]
        out += [
            "Per GPU (mean over held-out models):",
            "",
            *render_table(
                p.get("lomo_per_gpu", []), ("gpu", "pricer", "lomo_components_mape_pct", "own_components_mape_pct")
            ),
        ]
        out.append("")
    else:
        out += ["Leave-one-model-out: not computed in this run (validate --quick skips the refits).", ""]
    out += _render_e2e_out_of_cell(p.get("e2e_out_of_cell"))
    out += [
        "## Table fidelity (in-cell interpolation; not validation)",
        "",
        "The table pricer rebuilt from every other point of each cell (attention: every other row and column; "
        "all-reduce: every other size) and judged on the points in between. This is how well the table "
        "interpolates a cell it has measured, not a prediction; the table's validation is out of cell "
        "(pricer 'table', role 'validation'). MAPE %:",
        "",
    ]
    out += render_table(
        p.get("table_fidelity", []), ("gpu", "points", "mape_pct", "all_reduce_points", "all_reduce_mape_pct")
    )
    return out
