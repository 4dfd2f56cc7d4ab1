"""Service-level objectives for ``agentreplay plan``: a small grammar, parsed into terms a run's figures meet or miss.

Grammar (terms joined by ``,``; whitespace ignored; every term must hold)::

    TERM    := LATENCY "<=" SECONDS | GOODPUT ">=" FRACTION
    LATENCY := ("jct" | "ttft" | "tpot" | "queued") "_" ("p50" | "p90" | "p99" | "mean")
    GOODPUT := "goodput@" SECONDS          # share of programs whose JCT <= that many seconds
    SECONDS := a positive number, optionally followed by "s"
    FRACTION:= a number in (0, 1]

Examples: ``jct_p90<=600``, ``jct_p99<=1800s, ttft_p90<=5``, ``goodput@900>=0.95``.

Latency figures are the simulator's summary statistics (``summary.json``: ``jct_s.p90`` and so on, over every
program of the run; TTFT / TPOT / queueing over every turn). Goodput is task-level
(:func:`agentreplay.fleet.goodput.goodput`): programs finished within the deadline over programs attempted, a
program the run's admission removed (longer than ``max_model_len``) counting as missed.

Only the directions that more capacity improves are accepted (a latency at most, a goodput at least): the plan's
search assumes a configuration with more instances never does worse (:mod:`agentreplay.plan.search`), so an
objective that asks a latency to be *at least* something would make that search meaningless.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

LATENCY_FAMILIES: Final = ("jct", "ttft", "tpot", "queued")
STATS: Final = ("p50", "p90", "p99", "mean")
LATENCY_METRICS: Final = tuple(f"{f}_{s}" for f in LATENCY_FAMILIES for s in STATS)
GRAMMAR: Final = (
    "TERM[,TERM...] with TERM = METRIC<=SECONDS (METRIC one of jct|ttft|tpot|queued _ p50|p90|p99|mean)"
    ' or goodput@SECONDS>=FRACTION; e.g. "jct_p90<=600", "jct_p99<=1800,ttft_p90<=5", '
    '"goodput@900>=0.95"'
)

_TERM = re.compile(r"^(?P<metric>[A-Za-z0-9_@.+-]+?)\s*(?P<op><=|>=|==|=<|=>|<|>|=)\s*(?P<value>\S+)$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


class SloError(ValueError):
    """An objective that cannot be parsed or used; the message names the term and what is wrong."""


@dataclass(frozen=True, slots=True)
class Term:
    """One objective: ``metric op bound``."""

    metric: str  #: ``jct_p90`` ... or ``goodput@600``
    op: str  #: ``<=`` (latency) or ``>=`` (goodput)
    bound: float  #: seconds (latency) or a fraction in (0, 1] (goodput)
    deadline_s: float | None = None  #: the goodput deadline, seconds (None for a latency term)

    @property
    def column(self) -> str:
        """The results column that holds this metric (sweep results: ``jct_p90_s``; goodput: ``goodput_600s``)."""
        if self.deadline_s is not None:
            return goodput_column(self.deadline_s)
        return f"{self.metric}_s"

    @property
    def unit(self) -> str:
        return "" if self.deadline_s is not None else "s"

    @property
    def band_metric(self) -> str | None:
        """The :data:`agentreplay.bands.FAMILIES` key whose validation residuals describe this metric (None: no
        validated figure measures it; goodput is a share of programs under a deadline, not a measured figure)."""
        family = self.metric.split("_", 1)[0]
        return {"jct": "jct_s", "ttft": "ttft_s", "tpot": "tpot_s"}.get(family)

    def met(self, value: float | None) -> bool:
        """Whether ``value`` meets the term (a missing or NaN value never does)."""
        if value is None or not math.isfinite(value):
            return False
        return value <= self.bound if self.op == "<=" else value >= self.bound

    def slack(self, value: float | None) -> float:
        """Relative headroom: > 0 met with room, < 0 missed (``(bound - value) / bound`` for a latency)."""
        if value is None or not math.isfinite(value):
            return -math.inf
        return (self.bound - value) / self.bound if self.op == "<=" else (value - self.bound) / self.bound

    def text(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}{self.unit}"


def goodput_column(deadline_s: float) -> str:
    return f"goodput_{deadline_s:g}s".replace(".", "_")


def parse_slo(text: str) -> tuple[Term, ...]:
    """Parse an objective string (grammar in the module docstring); raises :class:`SloError` naming the term."""
    if not isinstance(text, str) or not text.strip():
        raise SloError(f"empty objective; expected {GRAMMAR}")
    terms: list[Term] = []
    for i, raw in enumerate(text.split(","), start=1):
        term = _term(raw.strip(), i, text)
        if any(t.metric == term.metric for t in terms):
            raise SloError(f"objective {text!r}: metric {term.metric!r} is given twice (term {i})")
        terms.append(term)
    return tuple(terms)


def _term(raw: str, i: int, whole: str) -> Term:
    where = f"objective {whole!r}, term {i} {raw!r}"
    if not raw:
        raise SloError(f"objective {whole!r}: term {i} is empty (a stray ','?); expected {GRAMMAR}")
    m = _TERM.match(raw)
    if m is None:
        raise SloError(f"{where}: expected METRIC<=VALUE or goodput@SECONDS>=FRACTION; grammar: {GRAMMAR}")
    metric, op, value = m.group("metric").lower(), m.group("op"), m.group("value")
    if op not in ("<=", ">="):
        raise SloError(f"{where}: operator {op!r} is not supported; use <= (latency) or >= (goodput)")
    if metric.startswith("goodput"):
        g = re.fullmatch(r"goodput@(?P<d>[^s]+)s?", metric)
        if g is None or not _NUMBER.match(g.group("d")):
            raise SloError(f"{where}: goodput needs its deadline in seconds, e.g. goodput@600>=0.9")
        deadline = float(g.group("d"))
        if not (math.isfinite(deadline) and deadline > 0):
            raise SloError(f"{where}: goodput deadline {g.group('d')!r} s must be > 0")
        if op != ">=":
            raise SloError(
                f"{where}: goodput must be bounded from below (goodput@{deadline:g}>=FRACTION); "
                "the search assumes more capacity never lowers goodput"
            )
        bound = _number(value, where, unit_ok=False)
        if not 0 < bound <= 1:
            raise SloError(f"{where}: goodput bound {value!r} must be a fraction in (0, 1]")
        return Term(f"goodput@{deadline:g}", op, bound, deadline)
    if metric not in LATENCY_METRICS:
        raise SloError(f"{where}: unknown metric {metric!r}; known: {', '.join(LATENCY_METRICS)}, goodput@SECONDS")
    if op != "<=":
        raise SloError(
            f"{where}: a latency must be bounded from above ({metric}<=SECONDS); the search assumes "
            "more capacity never raises latency"
        )
    bound = _number(value, where, unit_ok=True)
    if not bound > 0:
        raise SloError(f"{where}: bound {value!r} must be > 0 seconds")
    return Term(metric, op, bound)


def _number(value: str, where: str, *, unit_ok: bool) -> float:
    text = value[:-1] if unit_ok and value.endswith("s") else value
    if not _NUMBER.match(text):
        raise SloError(
            f"{where}: {value!r} is not a number" + (" (seconds, optionally with an 's')" if unit_ok else "")
        )
    x = float(text)
    if not math.isfinite(x):
        raise SloError(f"{where}: {value!r} is not a finite number")
    return x
