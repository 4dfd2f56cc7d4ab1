"""The evidence a plan's figures carry: each objective figure's error band from the closest validated cells, the
margin by which a configuration meets the objective, and its spread over the seeds.

Band of a figure (:func:`term_evidence`, from :func:`agentreplay.bands.closest`): the mean absolute error of that
metric family over the validation cells of the same GPU class, model class and pricing regime (``profiled``: the
configuration is priced from a deployment profile of exactly its GPU, model, dtype and TP; ``unprofiled``: the
roofline), naming the cells. Where no comparable cell exists the band is that of the nearest wider level (same
model class, same GPU class, every cell), said to be *not comparable*, with how those cells err (sign and size).
A goodput is not a measured figure of any validation cell; it is a share of programs under a JCT deadline, so it
carries the JCT cells' evidence, and no band edge is computed for it.

Marginal (:func:`margin`): a configuration meets a latency term by less than its band when the figure, moved by
the band's mean absolute error towards the bound, misses the bound; the comparable band is used, else the nearest
one (and the text says which).
"""

from __future__ import annotations

import math
from typing import Any

from agentreplay.bands import Band, closest, gpu_class, model_class
from agentreplay.plan.rank import spread
from agentreplay.plan.slo import Term
from agentreplay.plan.trial import Trial


def term_evidence(term: Term, trial: Trial, residuals: list[dict[str, Any]], regime: str) -> dict[str, Any]:
    """The band of ``term`` on ``trial``'s deployment as a JSON-ready record: ``short`` (a table cell), ``text``
    (a sentence naming the cells), ``band_pct`` (the MAPE used for the band edge, or None), ``comparable``."""
    gpu, model = trial.family.gpu, trial.family.model
    where = f"{gpu_class(gpu)} GPU, {model_class(model)} model, {regime}"
    metric = term.band_metric or "jct_s"
    b = closest(residuals, metric, gpu, model, regime) if residuals else None
    if b is None:
        return {
            "short": "no residuals",
            "text": "no validation residuals of this metric (error_bands.json missing or empty)",
            "band_pct": None,
            "comparable": False,
            "where": where,
        }
    prefix = "" if term.band_metric else "goodput is not a validated figure; the JCT it counts: "
    return {
        "short": _short(b),
        "text": prefix + _text(b, where),
        "band_pct": b.mape_pct if term.band_metric else None,
        "mean_signed_pct": b.mean_signed_pct,
        "n_cells": b.n_cells,
        "level": b.level,
        "comparable": b.comparable,
        "regime_recorded": b.regime_recorded,
        "cells": list(b.cells),
        "where": where,
    }


def _short(b: Band) -> str:
    if b.comparable:
        return f"+-{b.mape_pct:.0f}% ({b.n_cells} cells)"
    return f"none (nearest: {b.mean_signed_pct:+.0f}%, {b.n_cells} cells)"


def _text(b: Band, where: str) -> str:
    regime = "" if b.regime_recorded else "; the band file does not record their pricing regime"
    if b.comparable:
        return (
            f"+-{b.mape_pct:.0f}% over {b.n_cells} comparable validated cell(s) ({where}): {b.named()}; "
            f"{b.error_text()}{regime}"
        )
    return (
        f"no validated cell is comparable ({where}); nearest: {b.n_cells} cell(s) at level '{b.level}' "
        f"({b.named()}): {b.error_text()}{regime}"
    )


def margin(term: Term, trial: Trial, ev: dict[str, Any]) -> dict[str, Any]:
    """How far ``trial`` meets ``term``: ``margin_pct`` (relative headroom, %), the seed spread, and whether it
    is marginal against the band (None when no band edge applies, e.g. goodput)."""
    v = trial.value(term)
    slack = term.slack(v)
    per_seed = [x for x in trial.per_seed.get(term.metric) or [] if x is not None]
    band = ev.get("band_pct")
    marginal = None
    if band is not None and v is not None and math.isfinite(v):
        edge = v * (1 + band / 100) if term.op == "<=" else v * (1 - band / 100)
        marginal = not term.met(edge)
    unit = f" {term.unit}" if term.unit else ""
    text = f"{term.metric} {_num(v)}{unit} vs {term.op} {term.bound:g}{unit}: {slack:.0%} margin"
    if len(per_seed) > 1:
        text += (
            f"; over {len(per_seed)} seeds {_num(min(per_seed))}-{_num(max(per_seed))}{unit} "
            f"(spread {_num(spread(trial, term))}{unit}, judged on the worst)"
        )
    else:
        text += "; one seed: no spread measured"
    if marginal:
        text += f"; MARGINAL: the margin is smaller than the {band:.0f}% error band" + (
            "" if ev.get("comparable") else " of the nearest (not comparable) cells"
        )
    return {
        "value": v,
        "bound": term.bound,
        "margin_pct": 100 * slack if math.isfinite(slack) else None,
        "per_seed": per_seed,
        "spread": spread(trial, term),
        "marginal": marginal,
        "text": text,
    }


def _num(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
