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
Host-memory tiers a preset adds are costed too, and with prices (``PlanRequest.prices``) everything is in USD;
the ranking cost and the choice among equally cheap configurations (ties within the seed spread go to the
simplest deployment) are :mod:`agentreplay.plan.rank`'s.

Assumption (monotonicity): for a fixed family and load, more instances never make the objective's metrics worse,
so "meets the objective" is monotone in ``n`` and a family's cheapest feasible ``n`` can be found by search:
growing steps from ``n = 1`` (``n -> ceil(1.5 n)``: 1, 2, 3, 5, 8, 12, ...) until one is feasible, then bisection
between the last miss and the first hit. The assumption is checked on the results (:func:`monotonicity`): every
family's tried points are compared pairwise, and the chosen configuration's ``n + 1`` is run as well.

Cheap configurations first, early stop: each round runs the cheapest pending probes across all families (every
probe at the lowest GPU count pending, topped up to the executor's worker count with the next cheapest), so the
first feasible configurations found are the cheap ones. Once ``1 + runners_up`` families have a feasible
configuration, no family tries an ``n`` that costs more than the ``(1 + runners_up)``-th best family found so far
(cost per instance: GPUs, or USD with prices): what could not place among the reported configurations is never
run.

Each round submits one probe per family still searching as one sweep (:func:`agentreplay.sweep.run_sweep`) into
``OUT/sweep``, so the cells run in parallel on the executor, are stored as sweep results (Parquet) and are reused
when the same plan runs again into the same folder (:mod:`agentreplay.plan.output` carries them over).

Everything a request can get wrong (names, TP, load, the base config, missing prices) is checked by
:func:`prepare` before anything runs or any folder is made.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from agentreplay.plan.cell import PlanExecutor
from agentreplay.plan.rank import PRESET_FIELDS, Choice, Footprint, choose, cost, deployment_values, missing_prices
from agentreplay.plan.slo import Term
from agentreplay.plan.trial import PATHS, Family, Trial, combine, judge, monotonicity
from agentreplay.sweep import SpecError, SweepSpec, parse_spec, run_sweep
from agentreplay.sweep.store import ResultStore

if TYPE_CHECKING:
    from agentreplay.fleet.cost import Prices

__all__ = [
    "PATHS",
    "Family",
    "FamilyState",
    "PlanError",
    "PlanRequest",
    "PlanResult",
    "Prepared",
    "Trial",
    "bound_cost",
    "monotonicity",
    "next_probe",
    "pick",
    "plan",
    "prepare",
]

#: default seeds of the command line: three, so each objective figure has a spread to judge differences by
DEFAULT_SEEDS = (0, 1, 2)


class PlanError(ValueError):
    """A plan request that cannot run; the message names the option and the value."""


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
    prices: Prices | None = None  #: deployment prices (USD per GPU-hour / GiB-hour); None: rank in GPU-hours

    def cost(self, gpus: int) -> float:
        """Steady-state GPU-hours per 1,000 tasks of ``gpus`` GPUs at this load (module docstring)."""
        return gpus * 1000.0 / (self.load_per_s * 3600.0)


@dataclass(slots=True)
class FamilyState:
    family: Family
    lo: int = 0  #: largest instance count known to miss the objective (0: none)
    hi: int | None = None  #: smallest known to meet it
    error: str | None = None  #: the family cannot run (a cell failed, or the TP does not divide the model)
    end: str = ""  #: why its search ended: converged | pruned | max-instances | error
    unit: float | None = None  #: cost of one instance in the ranking's unit (None: its GPUs, TP)

    @property
    def unit_cost(self) -> float:
        return float(self.family.tp) if self.unit is None else self.unit


@dataclass(slots=True)
class Prepared:
    """A checked request: the base config, each family's swept values, footprint and pricing regime."""

    base: dict[str, Any]
    states: list[FamilyState]
    values: dict[Family, dict[str, Any]]  #: the PATHS values of each family except the instance count
    footprints: dict[Family, Footprint]
    regimes: dict[Family, str]  #: ``profiled`` (its own deployment profile prices it) or ``unprofiled``
    programs: int  #: programs replayed (the trace's, or --max-programs when fewer)


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
    choice: Choice | None = None
    prepared: Prepared | None = None


Progress = Callable[[int | str, list[tuple[Family, int]]], None]  #: (round number or "check", probes)


def _check_names(req: PlanRequest) -> dict[str, Any]:
    from agentreplay.perf import load_gpu, load_model
    from agentreplay.policy.presets import PRESETS
    from agentreplay.policy.registry import did_you_mean

    if not (math.isfinite(req.load_per_s) and req.load_per_s > 0):
        raise PlanError(f"--load {req.load_per_s!r}: must be > 0 programs per second")
    if req.max_instances < 1:
        raise PlanError(f"--max-instances {req.max_instances}: must be >= 1")
    if not req.slo:
        raise PlanError("--slo: at least one term is required")
    if not req.seeds:
        raise PlanError("--seeds: at least one seed is required")
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
            raise PlanError(f"--presets {p!r}: unknown preset{did_you_mean(p, PRESETS)}; known: {', '.join(PRESETS)}")
    for tp in req.tps:
        if not (isinstance(tp, int) and tp >= 1):
            raise PlanError(f"--tp {tp!r}: must be a positive integer")
    return specs


def families(req: PlanRequest) -> list[FamilyState]:
    """Every (GPU, model, TP, preset) of the request; unknown names fail, a TP that does not divide a model's
    heads is kept as a family with that error (reported, never silently dropped)."""
    specs = _check_names(req)
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
    """The router / policy / admission / host-tier values ``preset`` sets on ``base`` (via :func:`apply_preset`)."""
    from agentreplay.policy.presets import apply_preset
    from agentreplay.sim.config import from_dict

    return deployment_values(apply_preset(from_dict(base), preset), PRESET_FIELDS)


def pricer_of(base: dict[str, Any], fam: Family) -> tuple[str, str]:
    """``(hardware.perf, regime)`` of a family: the base config's ``[hardware] perf`` when it sets one, else what
    ``simulate`` runs by default (``auto``: the measured table where a deployment profile of exactly this GPU,
    model, dtype and TP is shipped, else the roofline); the regime is ``profiled`` when that profile prices it."""
    from agentreplay.perf.deploy import kv_cache_dtype
    from agentreplay.perf.registry import choose_pricer
    from agentreplay.sim.config import from_dict

    hw = from_dict(base).hardware
    pick_ = choose_pricer(fam.gpu, fam.model, hw.dtype, fam.tp, kv_dtype=kv_cache_dtype(hw.kv_cache_dtype))
    perf = str((base.get("hardware") or {}).get("perf") or "auto")
    profiled = pick_.kind == "table" and perf in ("auto", "table")
    return (pick_.kind if perf == "auto" else perf), ("profiled" if profiled else "unprofiled")


def prepare(req: PlanRequest) -> Prepared:
    """Check everything the request names (raising :class:`PlanError` naming the option) and resolve each
    family's config values, footprint and regime; nothing runs."""
    states = families(req)
    base = base_config(req)
    presets = {p: preset_values(base, p) for p in req.presets}
    cxl = float((base.get("tiers") or {}).get("cxl_gib") or 0.0)
    values, fps, regimes = {}, {}, {}
    for st in states:
        f = st.family
        perf, regimes[f] = pricer_of(base, f)
        values[f] = {"hardware.gpu": f.gpu, "hardware.model": f.model, "hardware.tp": f.tp, "hardware.perf": perf}
        values[f].update(presets[f.preset])
        fps[f] = Footprint.of({**values[f], "tiers.cxl_gib": cxl})
    if req.prices is not None:
        missing = missing_prices(req.prices, req.gpus, list(fps.values()))
        if missing:
            raise PlanError("--prices: " + "; ".join(missing))
    for st in states:  # one instance's cost: its GPUs, or its USD per 1,000 tasks with prices
        f = st.family
        st.unit = float(f.tp) if req.prices is None else cost(f.gpu, f.tp, 1, fps[f], req.load_per_s, req.prices).usd
    return Prepared(base, states, values, fps, regimes, _programs(req))


def _programs(req: PlanRequest) -> int:
    files = sorted(Path(req.trace).glob("programs.parquet"))
    if not files:
        raise PlanError(f"--trace {req.trace}: no programs.parquet (not a canonical trace folder)")
    n = pq.read_metadata(files[0]).num_rows
    return min(n, req.max_programs) if req.max_programs else n


def next_probe(st: FamilyState, bound: float, max_instances: int) -> int | None:
    """The instance count ``st`` tries next, or None (and ``st.end`` set) when its search is over.

    Growing steps from 1 (``ceil(1.5 lo)``) while nothing is feasible, then bisection of (lo, hi); never above
    ``max_instances`` nor above ``bound / unit cost`` (it could not place among the cheapest families)."""
    if st.error is not None:
        return None
    cap = max_instances
    if math.isfinite(bound):
        cap = min(cap, math.floor(bound / st.unit_cost * (1 + 1e-9)))
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


def bound_cost(states: Sequence[FamilyState], runners_up: int) -> float:
    """Cost (in units of :attr:`FamilyState.unit_cost`) of the ``(1 + runners_up)``-th cheapest family found
    feasible (inf while fewer are)."""
    costs = sorted(st.hi * st.unit_cost for st in states if st.hi is not None)
    return float(costs[runners_up]) if len(costs) > runners_up else math.inf


def pick(pending: Sequence[tuple[FamilyState, int]], workers: int) -> list[tuple[FamilyState, int]]:
    """A round's probes, cheap configurations first: every pending probe at the lowest cost, topped up
    with the next cheapest to ``workers`` probes (ties by family label, so the order is deterministic)."""
    ordered = sorted(pending, key=lambda p: (p[1] * p[0].unit_cost, p[0].family.label))
    lowest = ordered[0][1] * ordered[0][0].unit_cost
    cheap = [math.isclose(p[1] * p[0].unit_cost, lowest, rel_tol=1e-9) for p in ordered]
    out = [p for p, c in zip(ordered, cheap, strict=True) if c]
    return out + [p for p, c in zip(ordered, cheap, strict=True) if not c][: max(0, workers - len(out))]


def spec_of(req: PlanRequest, prep: Prepared, probes: Sequence[tuple[Family, int]]) -> SweepSpec:
    """The sweep of one round (every round is the same sweep: same trace, base and swept paths)."""
    rows = [{**prep.values[f], "hardware.instances": n} for f, n in probes]
    spec_data = {
        "sweep": {"trace": str(req.trace), "seeds": list(req.seeds)},
        "base": prep.base,
        "zip": [{p: [r[p] for r in rows] for p in PATHS}],
    }
    try:
        return parse_spec(spec_data)
    except SpecError as exc:
        raise PlanError(str(exc)) from None


def fingerprint(req: PlanRequest, prep: Prepared) -> str:
    """The sweep fingerprint of this plan's cells: results under another fingerprint cannot be reused."""
    return spec_of(req, prep, [(prep.states[0].family, 1)]).fingerprint


def plan(
    req: PlanRequest,
    executor: Any,
    out: str | Path,
    progress: Progress | None = None,
    prepared: Prepared | None = None,
) -> PlanResult:
    """Run the search (module docstring) with cells on ``executor``, results under ``out/sweep``."""
    t0 = time.perf_counter()
    prep = prepared or prepare(req)
    states = prep.states
    ex = PlanExecutor(executor, [t.deadline_s for t in req.slo if t.deadline_s is not None])
    workers = max(1, int(getattr(executor, "workers", 1) or 1))
    sweep_dir = Path(out) / "sweep"
    trials: list[Trial] = []
    tried: dict[tuple[Family, int], Trial] = {}
    rounds = 0

    def run(probes: list[tuple[FamilyState, int]], tag: int, check: bool = False) -> list[Trial]:
        if progress:
            progress("check" if check else tag, [(st.family, n) for st, n in probes])
        spec = spec_of(req, prep, [(st.family, n) for st, n in probes])
        before = _reusable(spec, sweep_dir, req.slo)
        run_sweep(spec, sweep_dir, ex)
        new = []
        k = len(req.seeds)  # the spec expands each probe into one cell per seed, in seed order
        for i, (st, n) in enumerate(probes):
            t = _trial(req, prep, st.family, n, tag, spec.cells[i * k : (i + 1) * k], sweep_dir, before, check)
            trials.append(t)
            tried[(st.family, n)] = t
            new.append(t)
        return new

    while True:
        bound = bound_cost(states, req.runners_up)
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
    choice = choose([t for t in trials if t.feasible], req.slo)
    chosen = choice.chosen if choice else None
    if (
        chosen is not None
        and chosen.instances < req.max_instances
        and (chosen.family, chosen.instances + 1) not in tried
    ):
        st = next(s for s in states if s.family == chosen.family)
        run([(st, chosen.instances + 1)], rounds + 1, check=True)
    return PlanResult(
        req,
        trials,
        states,
        chosen,
        _runners_up(trials, chosen, req),
        monotonicity(trials, req.slo),
        rounds,
        time.perf_counter() - t0,
        executor.description,
        choice,
        prep,
    )


def _runners_up(trials: Sequence[Trial], chosen: Trial | None, req: PlanRequest) -> list[Trial]:
    """The cheapest feasible configuration of each other family, in the order :func:`choose` would pick them
    (cheapest, then not beaten beyond the noise, then simplest)."""
    best: dict[Family, Trial] = {}
    for t in sorted((t for t in trials if t.feasible and not t.check), key=lambda t: (t.price.key, t.instances)):
        best.setdefault(t.family, t)
    left = [t for t in best.values() if chosen is None or t.family != chosen.family]
    out: list[Trial] = []
    while left and len(out) < req.runners_up:
        nxt = choose(left, req.slo)
        assert nxt is not None
        out.append(nxt.chosen)
        left.remove(nxt.chosen)
    return out


def _reusable(spec: SweepSpec, sweep_dir: Path, slo: Sequence[Term]) -> set[str]:
    """Cell ids already ok in ``sweep_dir`` with every figure the objective needs (a row from an earlier plan
    without one is removed, so it runs again)."""
    before = ResultStore(sweep_dir / "results", spec.params).ok_ids() if sweep_dir.is_dir() else set()
    for c in spec.cells:
        if c.cell_id in before and any(_row(sweep_dir, c.cell_id).get(t.column) is None for t in slo):
            for f in sweep_dir.glob(f"results/*/{c.cell_id}.parquet"):
                f.unlink()
            before.discard(c.cell_id)
    return before


def _trial(
    req: PlanRequest,
    prep: Prepared,
    fam: Family,
    n: int,
    tag: int,
    cells: Sequence[Any],
    sweep_dir: Path,
    before: set[str],
    check: bool,
) -> Trial:
    rows = [_row(sweep_dir, c.cell_id) for c in cells]
    status, error, figures, per_seed = combine(rows, req.slo)
    fp = prep.footprints[fam]
    t = Trial(
        fam,
        n,
        tag,
        "+".join(c.cell_id for c in cells),
        status,
        error,
        sum(float(r["wall_s"]) for r in rows),
        all(c.cell_id in before for c in cells),
        figures,
        req.cost(n * fam.tp),
        check=check,
        per_seed=per_seed,
        footprint=fp,
        priced=cost(fam.gpu, n * fam.tp, n, fp, req.load_per_s, req.prices),
    )
    judge(t, req.slo)
    return t


def _row(sweep_dir: Path, cell_id: str) -> dict[str, Any]:
    files = sorted(sweep_dir.glob(f"results/*/{cell_id}.parquet"))
    if not files:
        raise PlanError(f"{sweep_dir}/results: no row for cell {cell_id} after the sweep ran")
    return pq.read_table(files[-1], partitioning=None).to_pylist()[0]  # type: ignore[no-any-return]
