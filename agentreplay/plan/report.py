"""The plan's result as data (JSON, a CSV of every configuration tried) and as Markdown, with error bands.

Error bands (:mod:`agentreplay.bands`): a figure's band is the mean absolute error of that metric family over the
validation cells of the same GPU class and model class. Where no validation cell of that GPU and model class
exists the figure has "no band" (the wider fallbacks of :func:`agentreplay.bands.band` are named beside it, for
information, but never used as the figure's band). Goodput has no band: no validation cell measures it.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from agentreplay.bands import Band, band, load_residuals
from agentreplay.plan.search import PlanResult, Trial
from agentreplay.plan.slo import Term

COST_DEFINITION = (
    "GPU-hours per 1,000 tasks = GPUs x 1000 / (load x 3600): at a sustained Poisson load the fleet "
    "is provisioned for the arrival span, so each program costs GPUs / load GPU-seconds (steady "
    "state, idle time included); the simulation only decides whether the configuration meets the "
    "objective. 'run GPU-h/1k' is GPUs x makespan / programs x 1000 / 3600 of the finite run "
    "(ramp-up and drain included). GPU types are not priced: a GPU-hour is a GPU-hour."
)
MONOTONE_ASSUMPTION = (
    "assumption: for a fixed GPU, model, TP and preset, more instances never make the "
    "objective's metrics worse (the search bisects the instance count on it); checked on every "
    "family's tried points and on the chosen configuration's n + 1"
)


def band_of(term: Term, trial: Trial, residuals: list[dict[str, Any]]) -> tuple[Band | None, str]:
    """The band of ``term`` on ``trial``'s GPU and model class (None when there is none) and its text."""
    if term.band_metric is None:
        return None, "no band (not a validated figure)"
    b = band(residuals, term.band_metric, trial.family.gpu, trial.family.model) if residuals else None
    if b is None:
        return None, "no band"
    if b.level != "GPU and model class":
        return None, f"no band (nearest: {b.text()})"
    return b, b.text()


def within_band(term: Term, value: float | None, b: Band | None) -> bool | None:
    """Whether ``value`` still meets ``term`` at the pessimistic edge of its band (None without a band)."""
    if b is None or value is None or not math.isfinite(value):
        return None
    edge = value * (1 + b.mape_pct / 100) if term.op == "<=" else value * (1 - b.mape_pct / 100)
    return term.met(edge)


def trial_row(t: Trial, res: PlanResult, residuals: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration tried, as a flat record (the CSV row and the JSON entry)."""
    row: dict[str, Any] = {
        "round": "check" if t.check else t.round,
        "gpu": t.family.gpu,
        "model": t.family.model,
        "tp": t.family.tp,
        "preset": t.family.preset,
        "instances": t.instances,
        "gpus": t.gpus,
        "gpu_hours_per_1000_tasks": t.cost,
        "run_gpu_hours_per_1000_tasks": t.run_cost,
    }
    for term in res.request.slo:
        b, text = band_of(term, t, residuals)
        row[term.metric] = t.value(term)
        if t.per_seed:
            row[f"{term.metric} per seed"] = t.per_seed.get(term.metric)
        row[f"{term.metric} band"] = text
        row[f"{term.metric} meets at band edge"] = within_band(term, t.value(term), b)
    row.update(
        {
            "feasible": t.feasible,
            "why_not": t.why,
            "status": t.status,
            "wall_s": t.wall_s,
            "reused": t.reused,
            "programs": t.figures.get("programs"),
            "makespan_s": t.figures.get("makespan_s"),
            "cell_id": t.cell_id,
            "label": label(t),
        }
    )
    return row


def label(t: Trial) -> str:
    return f"{t.instances}x {t.family.gpu} tp{t.family.tp} {t.family.preset} ({t.family.model})"


def to_dict(res: PlanResult, residuals: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything the plan found, JSON-ready."""
    residuals = load_residuals() if residuals is None else residuals
    req = res.request
    rows = [trial_row(t, res, residuals) for t in res.trials]
    index = {id(t): i for i, t in enumerate(res.trials)}
    ran = [t for t in res.trials if not t.reused]
    return {
        "trace": _shown(req.trace),
        "load_programs_per_s": req.load_per_s,
        "tasks_per_day": req.load_per_s * 86400,
        "slo": [t.text() for t in req.slo],
        "programs": _programs(res),
        "max_programs": req.max_programs,
        "gpus": list(req.gpus),
        "models": list(req.models),
        "tp": list(req.tps),
        "presets": list(req.presets),
        "max_instances": req.max_instances,
        "seed": req.seeds[0],
        "seeds": list(req.seeds),
        "executor": res.executor,
        "rounds": res.rounds,
        "configurations_tried": len(res.trials),
        "configurations_simulated_now": len(ran),
        "simulation_wall_s_sum": sum(t.wall_s for t in ran),
        "wall_s": res.wall_s,
        "cost_definition": COST_DEFINITION,
        "assumption": MONOTONE_ASSUMPTION,
        "monotonicity_violations": res.violations,
        "chosen": rows[index[id(res.chosen)]] if res.chosen is not None else None,
        "runners_up": [rows[index[id(t)]] for t in res.runners_up],
        "families": [
            {
                "family": s.family.label,
                "largest_missing_n": s.lo or None,
                "smallest_meeting_n": s.hi,
                "search_end": s.end,
                "error": s.error,
            }
            for s in res.states
        ],
        "configurations": rows,
    }


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it (reports stay portable)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _programs(res: PlanResult) -> int | None:
    ps = {int(t.figures["programs"]) for t in res.trials if t.figures.get("programs") is not None}
    return max(ps) if ps else None


def write(res: PlanResult, out: Path, data: dict[str, Any]) -> list[Path]:
    """``plan.json``, ``configurations.csv`` and ``plan.md`` (the figure is :mod:`agentreplay.plan.figure`'s)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "plan.json", out / "configurations.csv", out / "plan.md"]
    paths[0].write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    rows = data["configurations"]
    with paths[1].open("w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    paths[2].write_text(markdown(data))
    return paths


def _seeds(data: dict[str, Any]) -> str:
    seeds = data.get("seeds", [data["seed"]])
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return (
        f"seeds {', '.join(map(str, seeds))} (a configuration meets the objective only under every seed; each "
        "objective figure is the worst over the seeds)"
    )


def _json_default(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else str(x)


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}g}"
    return str(v)


def headline(data: dict[str, Any]) -> str:
    """One sentence: the chosen configuration and its cost, or that nothing met the objective."""
    c = data["chosen"]
    slo = ", ".join(data["slo"])
    if c is None:
        return f"no configuration tried meets {slo} at {data['load_programs_per_s']:g} programs/s"
    return (
        f"cheapest configuration meeting {slo} at {data['load_programs_per_s']:g} programs/s: {c['label']}, "
        f"{c['gpus']} GPU(s), {c['gpu_hours_per_1000_tasks']:.3g} GPU-hours per 1,000 tasks"
    )


def markdown(data: dict[str, Any], figure: str | None = "cost_vs_slo.png") -> str:
    slo = data["slo"]
    subset = (
        f"the first {data['programs']} programs of the trace (--max-programs {data['max_programs']})"
        if data["max_programs"]
        else f"all {data['programs']} programs of the trace"
    )
    lines = [
        f"# Capacity plan: {', '.join(slo)} at {data['load_programs_per_s']:g} programs/s",
        "",
        f"- trace: `{data['trace']}`, {subset}; Poisson arrivals at {data['load_programs_per_s']:g} programs/s "
        f"({data['tasks_per_day']:,.0f} tasks a day), " + _seeds(data),
        f"- searched: GPUs {', '.join(data['gpus'])}; models {', '.join(data['models'])}; TP "
        f"{', '.join(map(str, data['tp']))}; presets {', '.join(data['presets'])}; 1 to "
        f"{data['max_instances']} instances",
        f"- {data['configurations_tried']} configurations tried in {data['rounds']} rounds "
        + (
            f"({data['configurations_simulated_now']} simulated now, the rest reused from this folder); "
            if data["configurations_simulated_now"] < data["configurations_tried"]
            else "(all simulated now); "
        )
        + f"total wall time {data['wall_s']:.1f} s (sum of simulation times "
        f"{data['simulation_wall_s_sum']:.1f} s) on {data['executor']}",
        f"- {data['cost_definition']}",
        f"- {data['assumption']}: "
        + (
            f"{len(data['monotonicity_violations'])} violation(s), listed below"
            if data["monotonicity_violations"]
            else "no violation found"
        ),
        "",
        f"**{headline(data)}.**",
        "",
    ]
    if data["chosen"] is not None:
        lines += ["## Chosen and runners-up", "", *_table([data["chosen"], *data["runners_up"]], slo), ""]
    if figure:
        lines += [f"![cost vs objective]({figure})", ""]
    if data["monotonicity_violations"]:
        lines += ["## Monotonicity violations", "", *(f"- {v}" for v in data["monotonicity_violations"]), ""]
    lines += [
        "## Families",
        "",
        "| family | largest n missing | smallest n meeting | search ended | error |",
        "|---|---:|---:|---|---|",
    ]
    for f in data["families"]:
        lines.append(
            f"| {f['family']} | {_fmt(f['largest_missing_n'])} | {_fmt(f['smallest_meeting_n'])} | "
            f"{f['search_end']} | {f['error'] or ''} |"
        )
    lines += ["", "## Every configuration tried (in order)", "", *_table(data["configurations"], slo), ""]
    return "\n".join(lines)


def _table(rows: list[dict[str, Any]], slo: list[str]) -> list[str]:
    metrics = [s.split("<=")[0].split(">=")[0] for s in slo]
    head = [
        "round",
        "configuration",
        "GPUs",
        "GPU-h/1k tasks",
        "run GPU-h/1k",
        *(c for m in metrics for c in (m, f"{m} band", "meets at band edge")),
        "meets",
        "why not",
        "wall s",
    ]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            _fmt(r["round"]),
            r["label"],
            _fmt(r["gpus"]),
            _fmt(r["gpu_hours_per_1000_tasks"]),
            _fmt(r["run_gpu_hours_per_1000_tasks"]),
            *(x for m in metrics for x in (_fmt(r[m]), r[f"{m} band"], _fmt(r[f"{m} meets at band edge"]))),
            _fmt(r["feasible"]),
            r["why_not"] or "",
            _fmt(r["wall_s"], 3) + (" (reused)" if r["reused"] else ""),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out
