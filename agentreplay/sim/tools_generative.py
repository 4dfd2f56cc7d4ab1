"""Generative tool mode: sample tool-gap durations (seconds) from a fitted per-class model file.

The model file is versioned JSON written by ``agentreplay fit-tools`` (``validation.tools.fit``)::

    {"format": "agentreplay-tool-model", "version": 1, "provenance": {...}, "default_source": "...",
     "classes": {cls: {"family", "params", "p_zero", "n", "aic", "bic", "ks", "ks_p", "ad", "median_s",
                       "p90_s", ...}},
     "overall": {...same fields, every class pooled...}}

A class's duration ``D`` (seconds) is a point mass at zero plus a continuous family on the positive part:
``P(D = 0) = p_zero`` and ``D | D > 0 ~ family(params)``. The zero mass exists because estimated gaps are
floored at 0 (DESIGN §3), so a continuous family alone cannot represent them.

This module holds the *one* implementation of every family (sampling, CDF, quantile, log-density, mean):
the fitter in ``validation/`` uses it to score fits, the simulator to draw. Draws use only the
``numpy.random.Generator`` passed in (no global RNG). Families and their parameters (all ``scale`` in
seconds; ``mu`` / ``sigma`` are the mean / sd of ``ln(seconds)``):

=================== ============================== ==================================================
family              params                         continuous part
=================== ============================== ==================================================
``exponential``     ``scale``                      mean ``scale``
``lognormal``       ``mu``, ``sigma``              ``ln D ~ N(mu, sigma^2)``
``gamma``           ``shape``, ``scale``
``weibull_min``     ``c``, ``scale``               ``P(D > x) = exp(-(x / scale)^c)``
``pareto``          ``b``, ``scale``               ``P(D > x) = (scale / x)^b`` for ``x >= scale``
``lognormal_mix2``  ``w``, ``mu1``, ``sigma1``,    ``w * lognormal(mu1, sigma1) + (1 - w) * lognormal(mu2, sigma2)``
                    ``mu2``, ``sigma2``
=================== ============================== ==================================================

Scaling (counterfactuals such as "tests twice as slow") multiplies draws by ``scale * class_scale[cls]``, so
every quantile, the median included, scales by exactly that factor.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt
from scipy import special

from agentreplay.sim.workload import Workload
from agentreplay.trace.taxonomy import TOOL_CLASSES

FORMAT: Final = "agentreplay-tool-model"
VERSION: Final = 1
OVERALL: Final = "overall"
#: Fields every class entry (and ``overall``) must carry; the statistics may be null.
CLASS_FIELDS: Final = ("family", "params", "p_zero", "n", "aic", "bic", "ks", "ks_p", "ad", "median_s", "p90_s")
_STAT_FIELDS: Final = ("aic", "bic", "ks", "ks_p", "ad", "median_s", "p90_s")


class ToolModelError(ValueError):
    """A tool-model file is invalid; the message names the file and the field (``classes.test.params.mu``)."""


Params: TypeAlias = Mapping[str, float]
Arr: TypeAlias = np.ndarray  # explicit: stays a valid alias when numpy is not installed (the mypyc build)


@dataclass(frozen=True, slots=True)
class Family:
    """One continuous family on ``(0, inf)``: parameter names and their checks, and its functions."""

    name: str
    params: tuple[str, ...]
    check: Callable[[Params], str | None]  #: None when valid, else what is wrong
    draw: Callable[[Params, np.random.Generator, int | None], Any]
    cdf: Callable[[Params, Arr], Arr]
    ppf: Callable[[Params, Arr], Arr]
    logpdf: Callable[[Params, Arr], Arr]
    mean: Callable[[Params], float]


def _positive(p: Params, *names: str) -> str | None:
    bad = [n for n in names if not p[n] > 0]
    return f"{bad[0]} must be > 0" if bad else None


def _ln_logpdf(x: Arr, mu: float, sigma: float) -> Arr:
    lx = np.log(x)
    return -0.5 * ((lx - mu) / sigma) ** 2 - np.log(sigma) - 0.5 * math.log(2 * math.pi) - lx


def _mix_cdf(p: Params, x: Arr) -> Arr:
    lx = np.log(np.maximum(x, 1e-300))
    c = p["w"] * special.ndtr((lx - p["mu1"]) / p["sigma1"]) + (1 - p["w"]) * special.ndtr(
        (lx - p["mu2"]) / p["sigma2"]
    )
    return np.where(x > 0, c, 0.0)


def _mix_ppf(p: Params, q: Arr) -> Arr:
    """Quantile of the two-lognormal mixture by bisection on ``ln x`` (the CDF is monotone; 80 halvings of a
    bracket spanning both components' quantiles reach double precision)."""
    q = np.asarray(q, dtype=float)
    zq = special.ndtri(np.clip(q, 1e-300, 1 - 1e-16))
    lo = np.minimum(p["mu1"] + p["sigma1"] * zq, p["mu2"] + p["sigma2"] * zq) - 1.0
    hi = np.maximum(p["mu1"] + p["sigma1"] * zq, p["mu2"] + p["sigma2"] * zq) + 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        below = _mix_cdf(p, np.exp(mid)) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.exp(0.5 * (lo + hi))


def _mix_draw(p: Params, rng: np.random.Generator, size: int | None) -> Any:
    first = rng.random(size) < p["w"]
    z = rng.standard_normal(size)
    return np.exp(np.where(first, p["mu1"] + p["sigma1"] * z, p["mu2"] + p["sigma2"] * z))


def _mix_logpdf(p: Params, x: Arr) -> Arr:
    a = math.log(p["w"]) + _ln_logpdf(x, p["mu1"], p["sigma1"])
    b = math.log1p(-p["w"]) + _ln_logpdf(x, p["mu2"], p["sigma2"])
    return np.logaddexp(a, b)


FAMILIES: Final[dict[str, Family]] = {
    f.name: f
    for f in (
        Family(
            "exponential",
            ("scale",),
            lambda p: _positive(p, "scale"),
            lambda p, rng, n: rng.exponential(p["scale"], n),
            lambda p, x: -np.expm1(-np.maximum(x, 0) / p["scale"]),
            lambda p, q: -p["scale"] * np.log1p(-q),
            lambda p, x: -x / p["scale"] - math.log(p["scale"]),
            lambda p: p["scale"],
        ),
        Family(
            "lognormal",
            ("mu", "sigma"),
            lambda p: _positive(p, "sigma"),
            lambda p, rng, n: rng.lognormal(p["mu"], p["sigma"], n),
            lambda p, x: np.where(x > 0, special.ndtr((np.log(np.maximum(x, 1e-300)) - p["mu"]) / p["sigma"]), 0.0),
            lambda p, q: np.exp(p["mu"] + p["sigma"] * special.ndtri(q)),
            lambda p, x: _ln_logpdf(x, p["mu"], p["sigma"]),
            lambda p: math.exp(p["mu"] + p["sigma"] ** 2 / 2),
        ),
        Family(
            "gamma",
            ("shape", "scale"),
            lambda p: _positive(p, "shape", "scale"),
            lambda p, rng, n: rng.gamma(p["shape"], p["scale"], n),
            lambda p, x: special.gammainc(p["shape"], np.maximum(x, 0) / p["scale"]),
            lambda p, q: p["scale"] * special.gammaincinv(p["shape"], q),
            lambda p, x: (
                (p["shape"] - 1) * np.log(x)
                - x / p["scale"]
                - special.gammaln(p["shape"])
                - p["shape"] * math.log(p["scale"])
            ),
            lambda p: p["shape"] * p["scale"],
        ),
        Family(
            "weibull_min",
            ("c", "scale"),
            lambda p: _positive(p, "c", "scale"),
            lambda p, rng, n: p["scale"] * rng.weibull(p["c"], n),
            lambda p, x: -np.expm1(-((np.maximum(x, 0) / p["scale"]) ** p["c"])),
            lambda p, q: p["scale"] * (-np.log1p(-q)) ** (1 / p["c"]),
            lambda p, x: (
                math.log(p["c"] / p["scale"]) + (p["c"] - 1) * np.log(x / p["scale"]) - (x / p["scale"]) ** p["c"]
            ),
            lambda p: p["scale"] * math.gamma(1 + 1 / p["c"]),
        ),
        # numpy's pareto() is the Lomax (Pareto II) law; scale * (1 + Lomax) is the classical Pareto I.
        Family(
            "pareto",
            ("b", "scale"),
            lambda p: _positive(p, "b", "scale"),
            lambda p, rng, n: p["scale"] * (1.0 + rng.pareto(p["b"], n)),
            lambda p, x: np.where(
                x >= p["scale"], -np.expm1(-p["b"] * np.log(np.maximum(x, p["scale"]) / p["scale"])), 0.0
            ),
            lambda p, q: p["scale"] * (1 - q) ** (-1 / p["b"]),
            lambda p, x: np.where(
                x >= p["scale"],
                math.log(p["b"]) + p["b"] * math.log(p["scale"]) - (p["b"] + 1) * np.log(np.maximum(x, p["scale"])),
                -np.inf,
            ),
            lambda p: p["b"] * p["scale"] / (p["b"] - 1) if p["b"] > 1 else math.inf,
        ),
        Family(
            "lognormal_mix2",
            ("w", "mu1", "sigma1", "mu2", "sigma2"),
            lambda p: "w must be in (0, 1)" if not 0 < p["w"] < 1 else _positive(p, "sigma1", "sigma2"),
            _mix_draw,
            _mix_cdf,
            _mix_ppf,
            _mix_logpdf,
            lambda p: (
                p["w"] * math.exp(p["mu1"] + p["sigma1"] ** 2 / 2)
                + (1 - p["w"]) * math.exp(p["mu2"] + p["sigma2"] ** 2 / 2)
            ),
        ),
    )
}


@dataclass(frozen=True, slots=True)
class ClassDist:
    """The duration law of one tool class: ``P(D = 0) = p_zero``, else ``family(params)`` (seconds)."""

    family: str
    params: dict[str, float]
    p_zero: float = 0.0
    n: int = 0  #: durations it was fitted on (zeros included)
    stats: dict[str, Any] = field(default_factory=dict)  #: aic, bic, ks, ... as stored in the file

    @property
    def fam(self) -> Family:
        return FAMILIES[self.family]

    def cdf(self, x: npt.ArrayLike) -> Arr:
        x = np.asarray(x, dtype=float)
        return np.where(x < 0, 0.0, self.p_zero + (1 - self.p_zero) * self.fam.cdf(self.params, x))

    def ppf(self, q: npt.ArrayLike) -> Arr:
        """Quantile (seconds); 0 for ``q <= p_zero``."""
        q = np.asarray(q, dtype=float)
        inner = np.clip((q - self.p_zero) / (1 - self.p_zero), 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            cont = self.fam.ppf(self.params, np.where(q > self.p_zero, inner, 0.5))
        return np.where(q > self.p_zero, cont, 0.0)

    def mean(self) -> float:
        return (1 - self.p_zero) * self.fam.mean(self.params)

    def draw(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """Unscaled draws: a float for ``size=None`` (one uniform and one family draw), else an array."""
        if size is None:
            if self.p_zero > 0 and rng.random() < self.p_zero:
                return 0.0
            return float(self.fam.draw(self.params, rng, None))
        cont = np.asarray(self.fam.draw(self.params, rng, size), dtype=float)
        if self.p_zero > 0:
            cont = np.where(rng.random(size) < self.p_zero, 0.0, cont)
        return cont


@dataclass(frozen=True, slots=True)
class ToolModelSpec:
    """A validated tool-model file."""

    classes: dict[str, ClassDist]
    overall: ClassDist
    default_source: str
    provenance: dict[str, Any]
    version: int = VERSION

    def dist(self, tool_class: str) -> ClassDist:
        """The class's law, or ``overall`` for a class the model has no fit for."""
        return self.classes.get(tool_class, self.overall)


def _num(where: str, v: Any, *, nullable: bool = False) -> float | None:
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ToolModelError(f"{where}: must be a finite number{' or null' if nullable else ''}, got {v!r}")
    return float(v)


def _class_dist(where: str, entry: Any) -> ClassDist:
    if not isinstance(entry, Mapping):
        raise ToolModelError(f"{where}: must be an object, got {type(entry).__name__}")
    missing = [k for k in CLASS_FIELDS if k not in entry]
    if missing:
        raise ToolModelError(f"{where}: missing field(s) {missing}")
    fam = entry["family"]
    if fam not in FAMILIES:
        raise ToolModelError(f"{where}.family: {fam!r} is not one of {sorted(FAMILIES)}")
    raw = entry["params"]
    if not isinstance(raw, Mapping):
        raise ToolModelError(f"{where}.params: must be an object, got {raw!r}")
    want = FAMILIES[fam].params
    if set(raw) != set(want):
        raise ToolModelError(f"{where}.params: family {fam!r} takes {list(want)}, got {sorted(raw)}")
    params = {k: _num(f"{where}.params.{k}", raw[k]) for k in want}
    problem = FAMILIES[fam].check(params)  # type: ignore[arg-type]
    if problem:
        raise ToolModelError(f"{where}.params: {problem}, got {params}")
    p_zero = _num(f"{where}.p_zero", entry["p_zero"])
    assert p_zero is not None
    if not 0 <= p_zero < 1:
        raise ToolModelError(f"{where}.p_zero: must be in [0, 1), got {p_zero}")
    n = entry["n"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ToolModelError(f"{where}.n: must be an integer >= 1, got {n!r}")
    stats = {k: _num(f"{where}.{k}", entry[k], nullable=True) for k in _STAT_FIELDS}
    extra = {k: v for k, v in entry.items() if k not in CLASS_FIELDS}
    return ClassDist(fam, params, p_zero, n, {**extra, **stats})  # type: ignore[arg-type]


def parse_tool_model(data: Any, *, where: str = "<memory>") -> ToolModelSpec:
    """Validate a decoded model file; raise :class:`ToolModelError` naming the first bad field."""
    try:
        if not isinstance(data, Mapping):
            raise ToolModelError(f"top level: must be an object, got {type(data).__name__}")
        for key in ("format", "version", "provenance", "default_source", "classes", "overall"):
            if key not in data:
                raise ToolModelError(f"{key}: missing")
        if data["format"] != FORMAT:
            raise ToolModelError(f"format: {data['format']!r}, expected {FORMAT!r}")
        if data["version"] != VERSION:
            raise ToolModelError(f"version: {data['version']!r}, this agentreplay reads version {VERSION}")
        if not isinstance(data["provenance"], Mapping):
            raise ToolModelError("provenance: must be an object")
        if not isinstance(data["default_source"], str):
            raise ToolModelError(f"default_source: must be a string, got {data['default_source']!r}")
        if not isinstance(data["classes"], Mapping):
            raise ToolModelError("classes: must be an object")
        unknown = sorted(set(data["classes"]) - set(TOOL_CLASSES))
        if unknown:
            raise ToolModelError(f"classes: unknown tool class(es) {unknown}; known: {list(TOOL_CLASSES)}")
        classes = {c: _class_dist(f"classes.{c}", e) for c, e in data["classes"].items()}
        overall = _class_dist(OVERALL, data["overall"])
    except ToolModelError as exc:
        raise ToolModelError(f"{where}: {exc}") from None
    return ToolModelSpec(classes, overall, data["default_source"], dict(data["provenance"]), VERSION)


def load_tool_model(source: str | os.PathLike[str] | Mapping[str, Any] | ToolModelSpec) -> ToolModelSpec:
    """A model from a JSON file path, an already decoded dict, or a spec (returned as is)."""
    if isinstance(source, ToolModelSpec):
        return source
    if isinstance(source, Mapping):
        return parse_tool_model(source)
    p = Path(source)
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ToolModelError(f"{p}: cannot read tool model ({exc})") from exc
    return parse_tool_model(data, where=str(p))


def write_tool_model(path: str | os.PathLike[str], data: Mapping[str, Any]) -> Path:
    """Validate ``data`` and write it as JSON atomically (temporary file, then rename)."""
    parse_tool_model(data, where=str(path))
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, p)
    return p


def _factor(where: str, v: Any) -> float:
    f = _num(where, v)
    assert f is not None
    if f < 0:
        raise ValueError(f"{where} must be >= 0, got {v!r}")
    return f


class ToolSampler:
    """Seeded draws of tool durations (seconds) per class, times ``scale * class_scale.get(cls, 1)``.

    Classes the model has no fit for use ``overall`` (their ``class_scale`` still applies).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | Mapping[str, Any] | ToolModelSpec,
        scale: float = 1.0,
        class_scale: Mapping[str, float] | None = None,
    ) -> None:
        self.model = load_tool_model(model)
        self.scale = _factor("scale", scale)
        unknown = sorted(set(class_scale or {}) - set(TOOL_CLASSES))
        if unknown:
            raise ValueError(f"class_scale: unknown tool class(es) {unknown}; known: {list(TOOL_CLASSES)}")
        self.class_scale = {c: _factor(f"class_scale[{c!r}]", v) for c, v in (class_scale or {}).items()}

    def factor(self, tool_class: str) -> float:
        return self.scale * self.class_scale.get(tool_class, 1.0)

    def sample(self, tool_class: str, rng: np.random.Generator, size: int | None = None) -> Any:
        """Durations in seconds: a float when ``size`` is None, else a float64 array of ``size``."""
        return self.model.dist(tool_class).draw(rng, size) * self.factor(tool_class)

    def quantile(self, tool_class: str, q: float) -> float:
        return float(self.model.dist(tool_class).ppf(np.asarray(q))) * self.factor(tool_class)

    def mean(self, tool_class: str) -> float:
        return self.model.dist(tool_class).mean() * self.factor(tool_class)


class GenerativeTools:
    """Tool Simulator generative mode: ``gap_s(turn)`` draws from the turn's tool class (or ``overall``).

    ``model`` is a model file path, a decoded dict, a :class:`ToolModelSpec` or a :class:`ToolSampler`
    (then ``scale`` / ``class_scale`` multiply the sampler's own factors). Draws come only from the ``rng``
    the orchestrator passes, so a run is reproducible from its seed.
    """

    def __init__(
        self,
        workload: Workload,
        model: str | os.PathLike[str] | Mapping[str, Any] | ToolModelSpec | ToolSampler,
        scale: float = 1.0,
        class_scale: dict[str, float] | None = None,
    ) -> None:
        if isinstance(model, ToolSampler):
            merged = {
                c: model.class_scale.get(c, 1.0) * (class_scale or {}).get(c, 1.0)
                for c in set(model.class_scale) | set(class_scale or {})
            }
            self.sampler = ToolSampler(model.model, model.scale * scale, merged)
        else:
            self.sampler = ToolSampler(model, scale, class_scale)
        # Resolve each turn's law and factor once: the hot path is one lookup and one draw.
        laws = {c: (self.sampler.model.dist(c), self.sampler.factor(c)) for c in set(workload.tool_class)}
        self._law = [laws[c] for c in workload.tool_class]

    def gap_s(self, turn: int, rng: np.random.Generator) -> float:
        dist, k = self._law[turn]
        return float(dist.draw(rng)) * k
