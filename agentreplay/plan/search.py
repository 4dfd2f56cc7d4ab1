"""The plan's search: the cheapest configuration that meets an objective at a sustained load, on the sweep engine.

A *family* is one (GPU, model, TP, preset); a configuration is a family and an instance count ``n``. Programs
arrive open-loop (Poisson at the given load, programs/s); every configuration replays the same programs with the
same seeds. With several seeds a configuration meets the objective only if it does under every seed, and its
figure for each objective term is the worst over the seeds (other figures are the first seed's).

Cost (GPU-hours per 1,000 tasks) of a configuration with ``G = n x TP`` GPUs at a load of ``L`` programs/s is the
steady-state figure ``G x 1000 / (L x 3600)``: at a fixed arrival rate the fleet is provisioned for the arrival
span, so each program costs ``G / L`` GPU-seconds whether the GPUs are busy or not. It does not depend on the
simulation, which decides only whether the configuration meets the objective. The run-level figure
``G x makespan / programs`` (which adds the ramp-up and the drain of a finite run) is reported beside it.
A GPU-hour is a GPU-hour here: an H100 hour and a B200 hour count the same (no prices).

Assumption (monotonicity): for a fixed family and load, more instances never make the objective's metrics worse,
so "meets the objective" is monotone in ``n`` and a family's cheapest feasible ``n`` can be found by search:
growing steps from ``n = 1`` (``n -> ceil(1.5 n)``: 1, 2, 3, 5, 8, 12, ...) until one is feasible, then bisection
between the last miss and the first hit. The assumption is checked on the results (:func:`monotonicity`): every
family's tried points are compared pairwise, and the chosen configuration's ``n + 1`` is run as well.

Cheap configurations first, early stop: each round runs the cheapest pending probes across all families (every
probe at the lowest GPU count pending, topped up to the executor's worker count with the next cheapest), so the
first feasible configurations found are the cheap ones. Once ``1 + runners_up`` families have a feasible
configuration, no family tries an ``n`` whose GPUs exceed the ``(1 + runners_up)``-th best family found so far:
what could not place among the reported configurations is never run.

Each round submits one probe per family still searching as one sweep (:func:`agentreplay.sweep.run_sweep`) into
``OUT/sweep``, so the cells run in parallel on the executor, are stored as sweep results (Parquet) and are reused
when the same plan runs again into the same folder.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from agentreplay.plan.cell import PlanExecutor
from agentreplay.plan.slo import Term
from agentreplay.sweep import SpecError, parse_spec, run_sweep
from agentreplay.sweep.spec import RESERVED_COLUMNS
from agentreplay.sweep.store import ResultStore

#: the swept config paths (one [[zip]] group; the same in every round, so every round is the same sweep)
PATHS = (
    "hardware.gpu",
    "hardware.model",
    "hardware.tp",
    "hardware.instances",
    "router.policy",
    "policy.queue",
    "policy.victim",
    "policy.retention",
    "tiers.dram_gib",
)
#: a metric counts as worse at more instances only beyond this relative change (routing ties shift a little)
MONOTONE_TOLERANCE = 0.01


class PlanError(ValueError):
    """A plan request that cannot run; the message names the option and the value."""


@dataclass(frozen=True, slots=True)
class Family:
    gpu: str
    model: str
    tp: int
    preset: str

    @property
    def label(self) -> str:
        return f"{self.gpu} {self.model} tp{self.tp} {self.preset}"


@dataclass(frozen=True, slots=True)
class PlanRequest:
    trace: Path  #: canonical trace folder
    load_per_s: float  #: program arrival rate, programs per second (Poisson)
    slo: tuple[Term, ...]
    gpus: tuple[str, ...] = ("h100-sxm",)
    models: tuple[str, ...] = ("llama-3.1-8b",)
    tps: tuple[int, ...] = (1,)
    presets: tuple[str, ...] = ("vllm",)
    max_instances: int = 16  #: the largest instance count tried per family
    max_programs: int | None = None  #: replay only the trace's first N programs (None: all)
    runners_up: int = 3  #: families reported (and searched) beyond the cheapest
    seeds: tuple[int, ...] = (0,)  #: every configuration runs once per seed; judged on the worst
    base: dict[str, Any] = field(default_factory=dict)  #: base config in TOML layout (``--config``)

    def cost(self, gpus: int) -> float:
        """Steady-state GPU-hours per 1,000 tasks of ``gpus`` GPUs at this load (module docstring)."""
        return gpus * 1000.0 / (self.load_per_s * 3600.0)


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

    @property
    def gpus(self) -> int:
        return self.instances * self.family.tp

    @property
    def run_cost(self) -> float:
        """GPUs x makespan / programs, per 1,000 tasks: the finite run's own figure, ramp-up and drain included."""
        m, p = self.figures.get("makespan_s"), self.figures.get("programs")
        return self.gpus * m / p * 1000.0 / 3600.0 if m and p else math.nan

    def value(self, term: Term) -> float | None:
        v = self.figures.get(term.column)
        return None if v is None else float(v)


@dataclass(slots=True)
class FamilyState:
    family: Family
    lo: int = 0  #: largest instance count known to miss the objective (0: none)
    hi: int | None = None  #: smallest known to meet it
    error: str | None = None  #: the family cannot run (a cell failed, or the TP does not divide the model)
    end: str = ""  #: why its search ended: converged | pruned | max-instances | error


@dataclass(slots=True)
class PlanResult:
    request: PlanRequest
    trials: list[Trial]
    states: list[FamilyState]
    chosen: Trial | None
    runners_up: list[Trial]
    violations: list[str]
    rounds: int
    wall_s: float
    executor: str


Progress = Callable[[int | str, list[tuple[Family, int]]], None]  #: (round number or "check", probes)


def families(req: PlanRequest) -> list[FamilyState]:
    """Every (GPU, model, TP, preset) of the request; unknown names fail, a TP that does not divide a model's
    heads is kept as a family with that error (reported, never silently dropped)."""
    from agentreplay.perf import load_gpu, load_model
    from agentreplay.policy.presets import PRESETS

    for g in req.gpus:
        try:
            load_gpu(g)
        except (KeyError, ValueError) as exc:
            raise PlanError(f"--gpus {g!r}: {exc}") from None
    specs = {}
    for m in req.models:
        try:
            specs[m] = load_model(m)
        except (KeyError, ValueError) as exc:
            raise PlanError(f"--models {m!r}: {exc}") from None
    for p in req.presets:
        if p not in PRESETS:
            raise PlanError(f"--presets {p!r}: unknown preset; known: {', '.join(PRESETS)}")
    for tp in req.tps:
        if not (isinstance(tp, int) and tp >= 1):
            raise PlanError(f"--tp {tp!r}: must be a positive integer")
    out = []
    for g, m, tp, p in itertools.product(req.gpus, req.models, req.tps, req.presets):
        st = FamilyState(Family(g, m, tp, p))
        try:
            specs[m].validate_tp(tp)
        except ValueError as exc:
            st.error, st.end = f"skipped: {exc}", "error"
        out.append(st)
    return out


def base_config(req: PlanRequest) -> dict[str, Any]:
    """The base config (TOML layout): the request's ``base`` with Poisson arrivals at the load, the programs
    subset and the first seed."""
    from agentreplay.sim.config import ConfigError, from_dict

    base = {k: (dict(v) if isinstance(v, dict) else v) for k, v in req.base.items()}
    if (base.get("hardware") or {}).get("groups"):
        raise PlanError(
            "--config: hardware.groups (a heterogeneous cluster) cannot be planned; the plan sets "
            "gpu, tp and instances itself"
        )
    base.setdefault("workload", {}).update(
        arrival="poisson", rate_per_s=float(req.load_per_s), max_programs=req.max_programs
    )
    base["seed"] = req.seeds[0]
    try:
        from_dict(base)
    except ConfigError as exc:
        raise PlanError(f"base config: {exc}") from None
    return base


def preset_values(base: dict[str, Any], preset: str) -> dict[str, Any]:
    """The router / policy / host-tier values ``preset`` sets on ``base`` (via :func:`apply_preset`)."""
    from agentreplay.policy.presets import apply_preset
    from agentreplay.sim.config import from_dict

    cfg = apply_preset(from_dict(base), preset)
    return {
        "router.policy": cfg.router.policy,
        "policy.queue": cfg.policy.queue,
        "policy.victim": cfg.policy.victim,
        "policy.retention": cfg.policy.retention,
        "tiers.dram_gib": float(cfg.tiers.dram_gib),
    }


def next_probe(st: FamilyState, bound_gpus: float, max_instances: int) -> int | None:
    """The instance count ``st`` tries next, or None (and ``st.end`` set) when its search is over.

    Growing steps from 1 (``ceil(1.5 lo)``) while nothing is feasible, then bisection of (lo, hi); never above
    ``max_instances`` nor above ``bound_gpus / tp`` (it could not place among the cheapest families)."""
    if st.error is not None:
        return None
    cap = min(max_instances, math.floor(bound_gpus / st.family.tp) if math.isfinite(bound_gpus) else max_instances)
    if st.hi is None:
        n = min(1 if st.lo == 0 else max(st.lo + 1, math.ceil(1.5 * st.lo)), cap)
        if n <= st.lo:
            st.end = "max-instances" if st.lo >= max_instances else "pruned"
            return None
        return n
    if st.hi - st.lo <= 1:
        st.end = "converged"
        return None
    n = min((st.lo + st.hi) // 2, cap)
    if n <= st.lo:
        st.end = "pruned"
        return None
    return n


def bound_gpus(states: Sequence[FamilyState], runners_up: int) -> float:
    """GPUs of the ``(1 + runners_up)``-th cheapest family found feasible (inf while fewer are)."""
    costs = sorted(st.hi * st.family.tp for st in states if st.hi is not None)
    return float(costs[runners_up]) if len(costs) > runners_up else math.inf


def pick(pending: Sequence[tuple[FamilyState, int]], workers: int) -> list[tuple[FamilyState, int]]:
    """A round's probes, cheap configurations first: every pending probe at the lowest GPU count, topped up
    with the next cheapest to ``workers`` probes (ties by family label, so the order is deterministic)."""
    ordered = sorted(pending, key=lambda p: (p[1] * p[0].family.tp, p[0].family.label))
    lowest = ordered[0][1] * ordered[0][0].family.tp
    out = [p for p in ordered if p[1] * p[0].family.tp == lowest]
    return out + [p for p in ordered if p[1] * p[0].family.tp > lowest][: max(0, workers - len(out))]


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


def rank_key(trial: Trial, slo: Sequence[Term]) -> tuple[Any, ...]:
    """Cheapest first; at equal cost the larger worst-term headroom, then fewer instances, then by name."""
    return (trial.cost, -min(t.slack(trial.value(t)) for t in slo), trial.instances, trial.family.label)


def plan(req: PlanRequest, executor: Any, out: str | Path, progress: Progress | None = None) -> PlanResult:
    """Run the search (module docstring) with cells on ``executor``, results under ``out/sweep``."""
    t0 = time.perf_counter()
    if not (math.isfinite(req.load_per_s) and req.load_per_s > 0):
        raise PlanError(f"--load {req.load_per_s!r}: must be > 0 programs per second")
    if req.max_instances < 1:
        raise PlanError(f"--max-instances {req.max_instances}: must be >= 1")
    if not req.slo:
        raise PlanError("--slo: at least one term is required")
    base = base_config(req)
    states = families(req)
    presets = {p: preset_values(base, p) for p in req.presets}
    ex = PlanExecutor(executor, [t.deadline_s for t in req.slo if t.deadline_s is not None])
    workers = max(1, int(getattr(executor, "workers", 1) or 1))
    sweep_dir = Path(out) / "sweep"
    trials: list[Trial] = []
    tried: dict[tuple[Family, int], Trial] = {}
    rounds = 0

    def run(probes: list[tuple[FamilyState, int]], tag: int, check: bool = False) -> list[Trial]:
        if progress:
            progress("check" if check else tag, [(st.family, n) for st, n in probes])
        rows = [
            {
                **{
                    "hardware.gpu": st.family.gpu,
                    "hardware.model": st.family.model,
                    "hardware.tp": st.family.tp,
                    "hardware.instances": n,
                },
                **presets[st.family.preset],
            }
            for st, n in probes
        ]
        spec_data = {
            "sweep": {"trace": str(req.trace), "seeds": list(req.seeds)},
            "base": base,
            "zip": [{p: [r[p] for r in rows] for p in PATHS}],
        }
        try:
            spec = parse_spec(spec_data)
        except SpecError as exc:
            raise PlanError(str(exc)) from None
        before = ResultStore(sweep_dir / "results", spec.params).ok_ids() if sweep_dir.is_dir() else set()
        for c in spec.cells:  # a row from an earlier plan without a figure this objective needs is run again
            if c.cell_id in before and any(_row(sweep_dir, c.cell_id).get(t.column) is None for t in req.slo):
                for f in sweep_dir.glob(f"results/*/{c.cell_id}.parquet"):
                    f.unlink()
                before.discard(c.cell_id)
        run_sweep(spec, sweep_dir, ex)
        new = []
        k = len(req.seeds)  # the spec expands each probe into one cell per seed, in seed order
        for i, (st, n) in enumerate(probes):
            cells = spec.cells[i * k : (i + 1) * k]
            rows = [_row(sweep_dir, c.cell_id) for c in cells]
            status, error, figures, per_seed = combine(rows, req.slo)
            t = Trial(
                st.family,
                n,
                tag,
                "+".join(c.cell_id for c in cells),
                status,
                error,
                sum(float(r["wall_s"]) for r in rows),
                all(c.cell_id in before for c in cells),
                figures,
                req.cost(n * st.family.tp),
                check=check,
                per_seed=per_seed,
            )
            judge(t, req.slo)
            trials.append(t)
            tried[(st.family, n)] = t
            new.append(t)
        return new

    while True:
        bound = bound_gpus(states, req.runners_up)
        pending = [(st, n) for st in states if (n := next_probe(st, bound, req.max_instances)) is not None]
        if not pending:
            break
        rounds += 1
        probes = pick(pending, workers)
        for t, (st, n) in zip(run(probes, rounds), probes, strict=True):
            if t.status != "ok":
                st.error, st.end = t.error, "error"
            elif t.feasible:
                st.hi = n
            else:
                st.lo = n
    feasible = sorted((t for t in trials if t.feasible), key=lambda t: rank_key(t, req.slo))
    chosen = feasible[0] if feasible else None
    if (
        chosen is not None
        and chosen.instances < req.max_instances
        and (chosen.family, chosen.instances + 1) not in tried
    ):
        st = next(s for s in states if s.family == chosen.family)
        run([(st, chosen.instances + 1)], rounds + 1, check=True)
    best: dict[Family, Trial] = {}
    for t in feasible:
        best.setdefault(t.family, t)
    runners = [t for t in best.values() if t is not chosen][: req.runners_up]
    return PlanResult(
        req,
        trials,
        states,
        chosen,
        runners,
        monotonicity(trials, req.slo),
        rounds,
        time.perf_counter() - t0,
        executor.description,
    )


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
            for term in slo:
                va, vb = a.value(term), b.value(term)
                if va is None or vb is None or not (math.isfinite(va) and math.isfinite(vb)):
                    continue
                scale = abs(va) or 1.0  # a goodput of 0 at the smaller n: compare absolutely
                worse = ((vb - va) if term.op == "<=" else (va - vb)) / scale
                if worse > MONOTONE_TOLERANCE:
                    out.append(
                        f"{fam.label}: {term.metric} {va:.4g} at n={a.instances} -> {vb:.4g} at "
                        f"n={b.instances} ({worse:+.1%} worse)"
                    )
    return out


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


def _row(sweep_dir: Path, cell_id: str) -> dict[str, Any]:
    files = sorted(sweep_dir.glob(f"results/*/{cell_id}.parquet"))
    if not files:
        raise PlanError(f"{sweep_dir}/results: no row for cell {cell_id} after the sweep ran")
    return pq.read_table(files[-1], partitioning=None).to_pylist()[0]  # type: ignore[no-any-return]


_NOT_FIGURES = RESERVED_COLUMNS | {p.replace(".", "_") for p in PATHS}


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _NOT_FIGURES}
