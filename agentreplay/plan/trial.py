"""One configuration tried by the plan (:class:`Trial`), how it is judged against the objective, how its per-seed
sweep rows combine, and the monotonicity check over a family's tried points."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentreplay.plan.rank import PRESET_FIELDS, Cost, Footprint
from agentreplay.plan.slo import Term
from agentreplay.sweep.spec import RESERVED_COLUMNS

#: the swept config paths (one [[zip]] group; the same in every round, so every round is the same sweep): the
#: hardware, then what a scheduling preset sets (:data:`agentreplay.plan.rank.PRESET_FIELDS`)
PATHS = ("hardware.gpu", "hardware.model", "hardware.tp", "hardware.instances", "hardware.perf", *PRESET_FIELDS)
#: a metric counts as worse at more instances only beyond this relative change (routing ties shift a little)
MONOTONE_TOLERANCE = 0.01


@dataclass(frozen=True, slots=True)
class Family:
    gpu: str
    model: str
    tp: int
    preset: str

    @property
    def label(self) -> str:
        return f"{self.gpu} {self.model} tp{self.tp} {self.preset}"


@dataclass(slots=True)
class Trial:
    """One configuration run (or reused from an earlier run of the same plan)."""

    family: Family
    instances: int
    round: int  #: 1-based search round; the monotonicity check's extra run is tagged ``check``
    cell_id: str
    status: str  #: ok | failed
    error: str | None
    wall_s: float  #: host seconds the simulation took (from the sweep results)
    reused: bool  #: True when the result came from an earlier run into the same folder
    figures: dict[str, Any]  #: the sweep result row's figures
    cost: float  #: steady-state GPU-hours per 1,000 tasks
    feasible: bool = False
    why: str = ""  #: why it misses the objective ("" when feasible)
    check: bool = False  #: run only to check monotonicity (chosen n + 1)
    per_seed: dict[str, list[float | None]] = field(default_factory=dict)  #: term metric -> per-seed values
    footprint: Footprint = field(default_factory=Footprint)  #: extra tiers and mechanisms of the family
    priced: Cost | None = None  #: the cost the plan ranks by (None: GPU-hours only, as ``cost``)

    @property
    def gpus(self) -> int:
        return self.instances * self.family.tp

    @property
    def price(self) -> Cost:
        """The ranking cost: ``priced``, else GPU-hours per 1,000 tasks with no extra tier."""
        return self.priced or Cost(self.cost, 0.0, 0.0, None, self.gpus, 0.0, 0.0)

    @property
    def run_cost(self) -> float:
        """GPUs x makespan / programs, per 1,000 tasks: the finite run's own figure, ramp-up and drain included."""
        m, p = self.figures.get("makespan_s"), self.figures.get("programs")
        return self.gpus * m / p * 1000.0 / 3600.0 if m and p else math.nan

    def value(self, term: Term) -> float | None:
        v = self.figures.get(term.column)
        return None if v is None else float(v)


def judge(trial: Trial, slo: Sequence[Term]) -> None:
    """Set ``trial.feasible`` and ``trial.why``: every term met, and no program removed by admission."""
    if trial.status != "ok":
        trial.feasible, trial.why = False, f"failed: {trial.error}"
        return
    removed = int(trial.figures.get("rejected_programs_removed") or 0)
    missed = [f"{t.metric} {trial.value(t):.4g}{t.unit}" for t in slo if not t.met(trial.value(t))]
    if removed:
        missed.append(f"{removed} programs removed by admission")
    trial.feasible, trial.why = not missed, "; ".join(missed)


def monotonicity(trials: Sequence[Trial], slo: Sequence[Term]) -> list[str]:
    """Where a family's results contradict "more instances never hurt": a feasible ``n`` with an infeasible
    larger ``n``, or an objective metric worse (by more than :data:`MONOTONE_TOLERANCE`) at a larger ``n``."""
    out = []
    by: dict[Family, list[Trial]] = {}
    for t in trials:
        if t.status == "ok":
            by.setdefault(t.family, []).append(t)
    for fam, ts in by.items():
        ts = sorted({t.instances: t for t in ts}.values(), key=lambda t: t.instances)
        for a, b in itertools.combinations(ts, 2):
            if a.feasible and not b.feasible:
                out.append(f"{fam.label}: n={a.instances} meets the objective but n={b.instances} does not ({b.why})")
            out += [_worse(fam, a, b, term) for term in slo if _worse(fam, a, b, term)]
    return out


def _worse(fam: Family, a: Trial, b: Trial, term: Term) -> str:
    va, vb = a.value(term), b.value(term)
    if va is None or vb is None or not (math.isfinite(va) and math.isfinite(vb)):
        return ""
    scale = abs(va) or 1.0  # a goodput of 0 at the smaller n: compare absolutely
    worse = ((vb - va) if term.op == "<=" else (va - vb)) / scale
    if worse <= MONOTONE_TOLERANCE:
        return ""
    return f"{fam.label}: {term.metric} {va:.4g} at n={a.instances} -> {vb:.4g} at n={b.instances} ({worse:+.1%} worse)"


def combine(
    rows: Sequence[dict[str, Any]], slo: Sequence[Term]
) -> tuple[str, str | None, dict[str, Any], dict[str, list[float | None]]]:
    """One configuration's result from its per-seed rows: failed if any seed failed; else the first seed's
    figures with each objective term's worst value over the seeds and the most programs removed by admission
    (and, with several seeds, each term's value per seed)."""
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        return "failed", bad[0].get("error"), {}, {}
    figs = [_figures(r) for r in rows]
    out = dict(figs[0])
    per_seed: dict[str, list[float | None]] = {}
    for term in slo:
        vals = [None if f.get(term.column) is None else float(f[term.column]) for f in figs]
        known = [v for v in vals if v is not None and math.isfinite(v)]
        if len(known) < len(vals):
            out[term.column] = None  # a seed without the figure: nothing to judge on
        else:
            out[term.column] = max(known) if term.op == "<=" else min(known)
        if len(rows) > 1:
            per_seed[term.metric] = vals
    out["rejected_programs_removed"] = max(int(f.get("rejected_programs_removed") or 0) for f in figs)
    return "ok", None, out, per_seed


_NOT_FIGURES = RESERVED_COLUMNS | {p.replace(".", "_") for p in PATHS}


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _NOT_FIGURES}
