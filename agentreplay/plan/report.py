"""The plan's result as data (JSON, a CSV of every configuration tried) and as Markdown, with its evidence.

Every figure the plan headlines carries its evidence (:mod:`agentreplay.plan.evidence`): the error band of the
closest validated cells, named (or, where none is comparable, the nearest cells and how they err), the margin by
which the chosen configuration meets the objective and the spread over the seeds; "MARGINAL" where the margin is
smaller than the band. The choice among equally cheap configurations and the rule that made it are
:mod:`agentreplay.plan.rank`'s; why the other configurations fail is :mod:`agentreplay.plan.explain`'s.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from agentreplay.bands import load_residuals
from agentreplay.plan.evidence import margin, term_evidence
from agentreplay.plan.explain import explain, lines
from agentreplay.plan.rank import TIE_FLOOR
from agentreplay.plan.search import PlanResult, Trial

COST_DEFINITION = (
    "GPU-hours per 1,000 tasks = GPUs x 1000 / (load x 3600): at a sustained Poisson load the fleet "
    "is provisioned for the arrival span, so each program costs GPUs / load GPU-seconds (steady "
    "state, idle time included); the simulation only decides whether the configuration meets the "
    "objective. Host-memory tiers a preset adds (host DRAM, CXL) cost GiB x 1000 / (load x 3600) GiB-hours per "
    "1,000 tasks. With --prices, cost = GPU-hours x the GPU's price + GiB-hours x the tier's price (USD); "
    "without, GPUs are not priced (a GPU-hour is a GPU-hour) and configurations rank by GPU-hours, then DRAM, "
    "then CXL GiB-hours. 'run GPU-h/1k' is GPUs x makespan / programs x 1000 / 3600 of the finite run "
    "(ramp-up and drain included)."
)
MONOTONE_ASSUMPTION = (
    "assumption: for a fixed GPU, model, TP and preset, more instances never make the "
    "objective's metrics worse (the search bisects the instance count on it); checked on every "
    "family's tried points and on the chosen configuration's n + 1"
)
TIE_RULE = (
    "choice: the cheapest configuration meeting the objective under every seed; at equal cost one beats another "
    "only where an objective figure is better by more than the noise (the larger seed spread, max - min over the "
    f"seeds, of the two, and at least {TIE_FLOOR:.0%} of the value) and worse on none; configurations that none "
    "beats are a tie, broken by the simplest deployment (fewer extra memory tiers, then fewer mechanisms beyond "
    "plain vLLM behind a load balancer, then fewer GPUs per instance)"
)


def trial_row(t: Trial, res: PlanResult, residuals: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration tried, as a flat record (the CSV row and the JSON entry)."""
    regime = _regime(res, t)
    row: dict[str, Any] = {
        "round": "check" if t.check else t.round,
        "gpu": t.family.gpu,
        "model": t.family.model,
        "tp": t.family.tp,
        "preset": t.family.preset,
        "instances": t.instances,
        "gpus": t.gpus,
        "cost": t.price.text(),
        "usd_per_1000_tasks": t.price.usd,
        "gpu_hours_per_1000_tasks": t.cost,
        "dram_gib_hours_per_1000_tasks": t.price.dram_gib_hours,
        "cxl_gib_hours_per_1000_tasks": t.price.cxl_gib_hours,
        "per_hour": t.price.hourly_text(),
        "run_gpu_hours_per_1000_tasks": t.run_cost,
        "deployment": t.footprint.text(),
        "regime": regime,
    }
    for term in res.request.slo:
        ev = term_evidence(term, t, residuals, regime)
        m = margin(term, t, ev)
        row[term.metric] = t.value(term)
        row[f"{term.metric} per seed"] = t.per_seed.get(term.metric)
        row[f"{term.metric} spread"] = m["spread"] if t.per_seed else None
        row[f"{term.metric} band"] = ev["short"]
        row[f"{term.metric} meets at band edge"] = None if m["marginal"] is None else not m["marginal"]
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


def _regime(res: PlanResult, t: Trial) -> str:
    return res.prepared.regimes.get(t.family, "unprofiled") if res.prepared else "unprofiled"


def label(t: Trial) -> str:
    return f"{t.instances}x {t.family.gpu} tp{t.family.tp} {t.family.preset} ({t.family.model})"


def evidence(t: Trial, res: PlanResult, residuals: list[dict[str, Any]]) -> dict[str, Any]:
    """Per objective term of ``t``: the band (named cells or nearest) and the margin, and whether any is
    marginal."""
    terms = {}
    for term in res.request.slo:
        ev = term_evidence(term, t, residuals, _regime(res, t))
        terms[term.metric] = {"band": ev, "margin": margin(term, t, ev)}
    return {"terms": terms, "marginal": any(v["margin"]["marginal"] for v in terms.values())}


def to_dict(res: PlanResult, residuals: list[dict[str, Any]] | None = None, workload: Any = None) -> dict[str, Any]:
    """Everything the plan found, JSON-ready. ``workload``: the compiled workload replayed, for the failure
    explanations' longest request (default: read from the trace when a configuration failed for capacity)."""
    residuals = load_residuals() if residuals is None else residuals
    req = res.request
    rows = [trial_row(t, res, residuals) for t in res.trials]
    index = {id(t): i for i, t in enumerate(res.trials)}
    ran = [t for t in res.trials if not t.reused]
    choice = res.choice
    base = res.prepared.base if res.prepared else {}
    return {
        "trace": _shown(req.trace),
        "load_programs_per_s": req.load_per_s,
        "tasks_per_day": req.load_per_s * 86400,
        "slo": [t.text() for t in req.slo],
        "programs": res.prepared.programs if res.prepared else _programs(res),
        "max_programs": req.max_programs,
        "gpus": list(req.gpus),
        "models": list(req.models),
        "tp": list(req.tps),
        "presets": list(req.presets),
        "max_instances": req.max_instances,
        "seed": req.seeds[0],
        "seeds": list(req.seeds),
        "prices": _prices(req),
        "executor": res.executor,
        "rounds": res.rounds,
        "configurations_tried": len(res.trials),
        "configurations_simulated_now": len(ran),
        "simulation_wall_s_sum": sum(t.wall_s for t in ran),
        "wall_s": res.wall_s,
        "cost_definition": COST_DEFINITION,
        "assumption": MONOTONE_ASSUMPTION,
        "tie_rule": TIE_RULE,
        "monotonicity_violations": res.violations,
        "chosen": rows[index[id(res.chosen)]] if res.chosen is not None else None,
        "decision": None
        if choice is None
        else {
            "rule": choice.rule,
            "tied": [label(t) for t in choice.tied],
            "beaten": [label(t) for t in choice.beaten],
            "evidence": evidence(choice.chosen, res, residuals),
        },
        "runners_up": [rows[index[id(t)]] for t in res.runners_up],
        "failures": explain(res.trials, req.slo, res.states, base, workload or (lambda: _workload(req))),
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


def _workload(req: Any) -> Any:
    from agentreplay.sweep.worker import load_workload

    w = load_workload(req.trace)
    return w.head(req.max_programs) if req.max_programs and req.max_programs < w.n_programs else w


def _prices(req: Any) -> dict[str, Any] | None:
    p = req.prices
    if p is None:
        return None
    return {
        "gpu_per_hour": {g: p.gpu_per_hour[g] for g in req.gpus if g in p.gpu_per_hour},
        "dram_per_gib_hour": p.dram_per_gib_hour,
        "cxl_per_gib_hour": p.cxl_per_gib_hour,
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
            w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
            w.writeheader()
            w.writerows(rows)
    paths[2].write_text(markdown(data))
    return paths


def _seeds(data: dict[str, Any]) -> str:
    seeds = data.get("seeds", [data["seed"]])
    if len(seeds) == 1:
        return f"seed {seeds[0]} (one seed: no spread, so only differences under {TIE_FLOOR:.0%} are ties)"
    return (
        f"seeds {', '.join(map(str, seeds))} (a configuration meets the objective only under every seed; each "
        "objective figure is the worst over the seeds, its spread the max - min)"
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


def cost_unit(data: dict[str, Any]) -> str:
    return "USD per 1,000 tasks" if data.get("prices") else "per 1,000 tasks (GPU-hours; extra tiers in GiB-hours)"


def headline(data: dict[str, Any]) -> str:
    """One sentence: the chosen configuration and its cost, or that nothing met the objective."""
    c = data["chosen"]
    slo = ", ".join(data["slo"])
    if c is None:
        return f"no configuration tried meets {slo} at {data['load_programs_per_s']:g} programs/s"
    marginal = " (MARGINAL: meets it by less than the error band)" if data["decision"]["evidence"]["marginal"] else ""
    return (
        f"cheapest configuration meeting {slo} at {data['load_programs_per_s']:g} programs/s: {c['label']}, "
        f"{c['gpus']} GPU(s), {c['cost']} per 1,000 tasks ({c['per_hour']} per hour of deployment){marginal}"
    )


def decision_lines(data: dict[str, Any]) -> list[str]:
    """The chosen configuration's evidence: per objective term its margin and seed spread, its band (named
    cells, or the nearest and how they err), then how it was chosen among equally cheap ones."""
    d = data["decision"]
    if d is None:
        return []
    out = []
    for e in d["evidence"]["terms"].values():
        out.append(e["margin"]["text"])
        out.append(f"  error band: {e['band']['text']}")
    out.append(f"deployment: {data['chosen']['deployment']}; pricing regime {data['chosen']['regime']}")
    out.append(f"choice: {d['rule']}")
    if d["tied"]:
        out.append(f"  tied: {', '.join(d['tied'])}")
    if d["beaten"]:
        out.append(f"  beaten on the objective beyond the noise at the same cost: {', '.join(d['beaten'])}")
    return out


def markdown(data: dict[str, Any], figure: str | None = "cost_vs_slo.png") -> str:
    slo = data["slo"]
    subset = (
        f"the first {data['programs']} programs of the trace (--max-programs {data['max_programs']})"
        if data["max_programs"]
        else f"all {data['programs']} programs of the trace"
    )
    lines_ = [
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
        "- prices: "
        + (json.dumps(data["prices"]) if data["prices"] else "none given (--prices): ranked in GPU-hours, then GiB-h"),
        f"- {data['tie_rule']}",
        f"- {data['assumption']}: "
        + (
            f"{len(data['monotonicity_violations'])} violation(s), listed below"
            if data["monotonicity_violations"]
            else "no violation found"
        ),
        "",
        f"**{headline(data)}.**",
        "",
        *(f"- {x}" for x in decision_lines(data)),
        "",
    ]
    if data["chosen"] is not None:
        lines_ += ["## Chosen and runners-up", "", *_table([data["chosen"], *data["runners_up"]], slo), ""]
    if figure:
        lines_ += [f"![cost vs objective]({figure})", ""]
    if data["failures"]:
        lines_ += ["## Why configurations fail", "", *(f"- {x.strip()}" for x in lines(data["failures"])), ""]
    if data["monotonicity_violations"]:
        lines_ += ["## Monotonicity violations", "", *(f"- {v}" for v in data["monotonicity_violations"]), ""]
    lines_ += [
        "## Families",
        "",
        "| family | largest n missing | smallest n meeting | search ended | error |",
        "|---|---:|---:|---|---|",
    ]
    for f in data["families"]:
        lines_.append(
            f"| {f['family']} | {_fmt(f['largest_missing_n'])} | {_fmt(f['smallest_meeting_n'])} | "
            f"{f['search_end']} | {f['error'] or ''} |"
        )
    lines_ += ["", "## Every configuration tried (in order)", "", *_table(data["configurations"], slo), ""]
    return "\n".join(lines_)


def _table(rows: list[dict[str, Any]], slo: list[str]) -> list[str]:
    metrics = [s.split("<=")[0].split(">=")[0] for s in slo]
    head = [
        "round",
        "configuration",
        "GPUs",
        "cost / 1k tasks",
        "run GPU-h/1k",
        *(c for m in metrics for c in (m, f"{m} spread", f"{m} band", "meets at band edge")),
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
            r["cost"],
            _fmt(r["run_gpu_hours_per_1000_tasks"]),
            *(
                x
                for m in metrics
                for x in (_fmt(r[m]), _fmt(r.get(f"{m} spread")), r[f"{m} band"], _fmt(r[f"{m} meets at band edge"]))
            ),
            _fmt(r["feasible"]),
            r["why_not"] or "",
            _fmt(r["wall_s"], 3) + (" (reused)" if r["reused"] else ""),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out
