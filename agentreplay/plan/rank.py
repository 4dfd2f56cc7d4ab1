"""What a configuration costs, how simple it is, and which of several that meet an objective is chosen.

Cost (:class:`Cost`) of a configuration of ``n`` instances at a sustained load of ``L`` programs/s, per 1,000
tasks (``1000 / (L x 3600)`` hours of the deployment serve 1,000 tasks at that load):

- GPU-hours: ``n x TP x 1000 / (L x 3600)``;
- host-memory tiers the configuration adds (:class:`Footprint`): ``n x GiB per instance x 1000 / (L x 3600)``
  GiB-hours of host DRAM and of CXL memory (a preset that needs a host tier, e.g. ``lmcache-offload``, adds
  :data:`agentreplay.policy.presets.DEFAULT_HOST_DRAM_GIB` per instance when the base configuration has none);
- with prices (:class:`agentreplay.fleet.cost.Prices`: ``gpu_per_hour``, ``dram_per_gib_hour``,
  ``cxl_per_gib_hour``) the sum in USD; without, no currency: configurations rank by GPU-hours, then DRAM
  GiB-hours, then CXL GiB-hours, and the cost is shown as ``44.4 GPU-h + 1,422 GiB-h DRAM``.

Choice (:func:`choose`) among the configurations that meet the objective, all judged on the worst value over the
seeds:

1. the cheapest (equal cost: within :data:`COST_TOLERANCE`, relative);
2. among those, a configuration is *beaten* only by one that is better on some objective term by more than the
   noise and worse on none by more than the noise. Noise for a term between configurations ``a`` and ``b`` is
   ``max(spread(a), spread(b), TIE_FLOOR x |value|)``, with ``spread`` the max - min of the term over the seeds
   (:func:`spread`); with one seed the spread is 0 and only :data:`TIE_FLOOR` remains. Configurations that no
   other beats are a TIE, and reported as one;
3. a tie goes to the simplest deployment (:func:`simplicity`): fewer extra memory tiers, then fewer mechanisms
   beyond plain vLLM behind a load balancer (a router other than least-loaded / round-robin, a queue other than
   FCFS, a victim other than most-recent, a retention other than LRU, an admission policy), then fewer GPUs per
   instance, then the name (only for identical deployments), so floating-point noise never decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentreplay.plan.slo import Term

if TYPE_CHECKING:
    from agentreplay.fleet.cost import Prices
    from agentreplay.plan.search import Trial
    from agentreplay.sim.config import SimConfig

#: two costs closer than this (relative) are equal
COST_TOLERANCE = 1e-9
#: objective values closer than this share of the value are a tie whatever the seeds say (the validation bands
#: are tens of percent wide; a difference under 1% is not one the simulator can be trusted to resolve)
TIE_FLOOR = 0.01
#: behaviour of plain vLLM behind a load balancer: a field set otherwise is one more mechanism to deploy
PLAIN = {
    "router.policy": ("least-loaded", "round-robin"),
    "policy.queue": ("fcfs",),
    "policy.victim": ("most-recent",),
    "policy.retention": ("lru",),
    "admission.policy": ("admit-all",),
}


#: The config fields deployments are told apart by (what :meth:`Footprint.of` reads), as ``section.field``.
DEPLOYMENT_FIELDS: tuple[str, ...] = (
    "router.policy",
    "policy.queue",
    "policy.victim",
    "policy.retention",
    "admission.policy",
    "tiers.dram_gib",
    "tiers.cxl_gib",
)
#: Those a scheduling preset sets (no preset adds a CXL tier).
PRESET_FIELDS: tuple[str, ...] = DEPLOYMENT_FIELDS[:-1]


def deployment_values(cfg: SimConfig, fields: Sequence[str] = DEPLOYMENT_FIELDS) -> dict[str, Any]:
    """``cfg``'s values of ``fields`` by ``section.field`` path, the host tiers' sizes as floats (GiB)."""
    out: dict[str, Any] = {}
    for path in fields:
        section, name = path.split(".")
        value = getattr(getattr(cfg, section), name)
        out[path] = float(value) if section == "tiers" else value
    return out


@dataclass(frozen=True, slots=True)
class Footprint:
    """What one instance of a family deploys beyond its GPUs, and which mechanisms it turns on."""

    dram_gib: float = 0.0  #: host DRAM KV tier per instance, GiB
    cxl_gib: float = 0.0  #: CXL KV tier per instance, GiB
    mechanisms: tuple[str, ...] = ()  #: ``router.policy=session-affinity`` ...: fields set beyond :data:`PLAIN`

    @classmethod
    def of(cls, values: dict[str, Any]) -> Footprint:
        """From a family's swept values (``tiers.dram_gib``, ``tiers.cxl_gib`` and the :data:`PLAIN` paths)."""
        mech = tuple(f"{k}={values[k]}" for k, plain in PLAIN.items() if k in values and values[k] not in plain)
        return cls(float(values.get("tiers.dram_gib") or 0.0), float(values.get("tiers.cxl_gib") or 0.0), mech)

    @property
    def tiers(self) -> tuple[str, ...]:
        return tuple(t for t, gib in (("DRAM", self.dram_gib), ("CXL", self.cxl_gib)) if gib > 0)

    def text(self) -> str:
        parts = [f"{gib:g} GiB {t} per instance" for t, gib in (("DRAM", self.dram_gib), ("CXL", self.cxl_gib)) if gib]
        return ", ".join(parts + list(self.mechanisms)) or "plain (no extra tier or mechanism)"


@dataclass(frozen=True, slots=True)
class Cost:
    """Cost of a configuration per 1,000 tasks (module docstring), and per hour of the deployment."""

    gpu_hours: float
    dram_gib_hours: float
    cxl_gib_hours: float
    usd: float | None  #: None without prices
    gpus: int
    dram_gib: float  #: the deployment's host DRAM, GiB (all instances)
    cxl_gib: float

    @property
    def key(self) -> tuple[float, ...]:
        """Ranking key: USD with prices, else GPU-hours, then DRAM, then CXL GiB-hours."""
        if self.usd is not None:
            return (self.usd,)
        return (self.gpu_hours, self.dram_gib_hours, self.cxl_gib_hours)

    def text(self) -> str:
        """``$118.7`` with prices, else ``44.4 GPU-h + 1,422 GiB-h DRAM`` (per 1,000 tasks)."""
        if self.usd is not None:
            return f"${self.usd:,.2f}"
        return " + ".join(
            [f"{self.gpu_hours:.3g} GPU-h"]
            + [f"{h:,.0f} GiB-h {t}" for t, h in (("DRAM", self.dram_gib_hours), ("CXL", self.cxl_gib_hours)) if h]
        )

    def hourly_text(self) -> str:
        """What the deployment holds for an hour: ``8 GPU-h + 256 GiB-h DRAM``."""
        return " + ".join(
            [f"{self.gpus} GPU-h"]
            + [f"{g:,.0f} GiB-h {t}" for t, g in (("DRAM", self.dram_gib), ("CXL", self.cxl_gib)) if g]
        )


def cost(gpu: str, gpus: int, instances: int, fp: Footprint, load_per_s: float, prices: Prices | None = None) -> Cost:
    """The :class:`Cost` of ``instances`` instances (``gpus`` GPUs in all) of ``gpu`` with footprint ``fp``."""
    hours = 1000.0 / (load_per_s * 3600.0)  # deployment hours that serve 1,000 tasks
    dram, cxl = instances * fp.dram_gib, instances * fp.cxl_gib
    usd = None
    if prices is not None:  # every price it needs was checked by missing_prices before the plan ran
        usd = gpus * hours * prices.gpu_per_hour[gpu]
        usd += dram * hours * (prices.dram_per_gib_hour or 0.0) + cxl * hours * (prices.cxl_per_gib_hour or 0.0)
    return Cost(gpus * hours, dram * hours, cxl * hours, usd, gpus, dram, cxl)


def missing_prices(prices: Prices, gpus: Sequence[str], footprints: Sequence[Footprint]) -> list[str]:
    """What ``prices`` must price for these GPUs and footprints but does not (empty: all priced)."""
    out = [f"gpu_per_hour has no price for {g!r}" for g in gpus if g not in prices.gpu_per_hour]
    if any(f.dram_gib for f in footprints) and prices.dram_per_gib_hour is None:
        out.append("no dram_per_gib_hour (a configuration adds a host DRAM tier)")
    if any(f.cxl_gib for f in footprints) and prices.cxl_per_gib_hour is None:
        out.append("no cxl_per_gib_hour (a configuration adds a CXL tier)")
    return out


def simplicity(trial: Trial) -> tuple[int, int, int]:
    """Smaller is simpler: extra memory tiers, mechanisms beyond plain vLLM, GPUs per instance."""
    fp = trial.footprint
    return (len(fp.tiers), len(fp.mechanisms), trial.family.tp)


def spread(trial: Trial, term: Term) -> float:
    """Max - min of ``term`` over the seeds (0 with one seed or a missing value)."""
    vals = [v for v in trial.per_seed.get(term.metric) or [] if v is not None and math.isfinite(v)]
    return max(vals) - min(vals) if len(vals) > 1 else 0.0


def noise(a: Trial, b: Trial, term: Term) -> float:
    """The difference of ``term`` between ``a`` and ``b`` below which it is noise (module docstring)."""
    va, vb = a.value(term), b.value(term)
    scale = max(abs(va or 0.0), abs(vb or 0.0))
    return max(spread(a, term), spread(b, term), TIE_FLOOR * scale)


def beats(a: Trial, b: Trial, slo: Sequence[Term]) -> bool:
    """``a`` is better than ``b`` beyond the noise on some term and worse beyond it on none."""
    better = False
    for term in slo:
        va, vb = a.value(term), b.value(term)
        if va is None or vb is None:
            continue
        gain = (vb - va) if term.op == "<=" else (va - vb)
        if abs(gain) <= noise(a, b, term):
            continue
        if gain < 0:
            return False
        better = True
    return better


@dataclass(slots=True)
class Choice:
    """The chosen configuration and how it was chosen."""

    chosen: Trial
    tied: list[Trial]  #: the other configurations of the same cost that no configuration beats (the tie)
    beaten: list[Trial]  #: configurations of the same cost beaten on the objective beyond the noise
    rule: str  #: one sentence: why this one


def choose(feasible: Sequence[Trial], slo: Sequence[Term]) -> Choice | None:
    """The configuration to deploy among ``feasible`` (module docstring); None when there is none."""
    if not feasible:
        return None
    low = min(t.price.key for t in feasible)
    same = [t for t in feasible if _equal(t.price.key, low)]
    front = [t for t in same if not any(beats(o, t, slo) for o in same if o is not t)]
    front.sort(key=lambda t: (simplicity(t), t.family.label, t.instances))
    chosen, tied = front[0], front[1:]
    beaten = [t for t in same if t not in front]
    if not tied and not beaten:
        rule = "the only configuration at the lowest cost"
    elif not tied:
        rule = f"better on the objective, beyond the seed spread, than {len(beaten)} other(s) at the same cost"
    else:
        why = _tie_break(chosen, tied[0])
        rule = (
            f"tied with {len(tied)} other(s) at the same cost (objective within the seed spread or {TIE_FLOOR:.0%}); "
            f"tie broken by {why}"
        )
    return Choice(chosen, tied, beaten, rule)


def _equal(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(math.isclose(x, y, rel_tol=COST_TOLERANCE, abs_tol=1e-12) for x, y in zip(a, b, strict=True))


def _tie_break(chosen: Trial, runner: Trial) -> str:
    a, b = simplicity(chosen), simplicity(runner)
    if a[0] < b[0]:
        return (
            f"the simpler deployment: no extra memory tier ({chosen.family.preset}) against {runner.footprint.text()}"
        )
    if a[1] < b[1]:
        mech = ", ".join(chosen.footprint.mechanisms) or "none"
        return f"the simpler deployment: fewer mechanisms beyond plain vLLM ({chosen.family.preset}: {mech})"
    if a[2] < b[2]:
        return "the simpler deployment: fewer GPUs per instance"
    return "name (the tied deployments are equally simple)"
