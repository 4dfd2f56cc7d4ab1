"""Tool-gap KV retention (a policy axis, :mod:`agentreplay.policy.registry`): what happens to a program's KV when
its call ends and its tool starts. Registered in :data:`RETENTIONS` (``[policy] retention``, CLI
``--retention``); a policy is built as ``cls(params, tool_stats)``.

Each policy returns a :class:`Decision`: ``release`` (vLLM: blocks join the LRU free queue, still hit-able),
``drop`` (forget them now), ``pin`` for ``ttl_s`` seconds (``inf`` = until the next call), or ``offload``
(write to host memory, LMCache-style). Policies that learn tool durations see every finished gap through
:class:`ToolStats` (online: what a real system could know at that moment).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from agentreplay.policy.registry import Entry, NoParams, Registry, check
from agentreplay.request import Request

Action = Literal["release", "drop", "pin", "offload"]


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    ttl_s: float = math.inf
    reason: str = ""


#: the decisions of the stateless policies, made once (a Decision is immutable; one is asked for every call)
_RELEASE = Decision("release")
_DROP = Decision("drop")


@dataclass(slots=True)
class ToolStats:
    """Observed tool durations per class. ``observe`` is O(1) (a simulation records millions); the sorted copy a
    quantile needs is brought up to date when one is asked for (a short batch is inserted, a long one merged)."""

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    _sorted: dict[str, list[float]] = field(default_factory=dict)
    #: not yet sorted, as C doubles (8 bytes each, not a 32-byte float object: a day of 40 M tool gaps is
    #: 0.3 GB, not 1.3 GB; the values are the same)
    _new: dict[str, array[float]] = field(default_factory=dict)
    #: keep every duration (what :meth:`quantile` reads); False keeps only counts and sums (means), for a run
    #: whose policies read no quantile: a day of 40 M tool gaps then holds no 0.3 GB of durations
    samples: bool = True

    # written out, not left to @dataclass: mypyc compiles this one (see tests/sim/test_native.py)
    def __init__(
        self,
        sums: dict[str, float] | None = None,
        counts: dict[str, int] | None = None,
        _sorted: dict[str, list[float]] | None = None,
        _new: dict[str, array[float]] | None = None,
        samples: bool = True,
    ) -> None:
        self.sums = {} if sums is None else sums
        self.counts = {} if counts is None else counts
        self._sorted = {} if _sorted is None else _sorted
        self._new = {} if _new is None else _new
        self.samples = samples

    def keep_samples(self) -> None:
        """A policy that reads quantiles asks for the durations (before any is observed)."""
        if not self.samples and self.counts:
            raise RuntimeError("ToolStats: durations asked for after observations were made without them")
        self.samples = True

    def observe(self, tool_class: str, duration_s: float) -> None:
        if self.samples:
            new = self._new.get(tool_class)
            if new is None:
                new = self._new[tool_class] = array("d")
            new.append(duration_s)
        self.sums[tool_class] = self.sums.get(tool_class, 0.0) + duration_s
        self.counts[tool_class] = self.counts.get(tool_class, 0) + 1

    def count(self, tool_class: str) -> int:
        return self.counts.get(tool_class, 0)

    def mean(self, tool_class: str) -> float | None:
        n = self.count(tool_class)
        return self.sums[tool_class] / n if n else None

    def sorted_s(self, tool_class: str) -> list[float]:
        """The class's durations, sorted."""
        if not self.samples:
            raise RuntimeError("ToolStats: durations were not kept (keep_samples() before observing)")
        xs = self._sorted.setdefault(tool_class, [])
        new = self._new.get(tool_class)
        if new:
            if len(new) <= 8:
                for v in new:
                    bisect.insort(xs, v)
            else:
                xs.extend(new)
                xs.sort()
            del new[:]
        return xs

    def quantile(self, tool_class: str, q: float) -> float | None:
        xs = self.sorted_s(tool_class)
        if not xs:
            return None
        return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


class GapContext:
    """What a retention policy may look at when a call ends (all per instance). ``recompute_s`` may be given as
    a zero-argument callable: it is priced on first read only (most policies never read it)."""

    __slots__ = ("_recompute", "context_blocks", "now_s", "swap_s", "true_gap_s", "used_blocks")

    def __init__(
        self,
        now_s: float,
        context_blocks: int,
        used_blocks: int,
        recompute_s: float | Callable[[], float],
        swap_s: float | None,
        true_gap_s: float,
    ) -> None:
        self.now_s = now_s
        self.context_blocks = context_blocks  #: blocks of the program's history held by the finished call
        self.used_blocks = used_blocks  #: blocks in use on the instance (the running batch's memory)
        self._recompute = recompute_s
        self.swap_s = swap_s  #: time to write the context to host memory and back (None: no tier)
        self.true_gap_s = true_gap_s  #: the actual tool duration (only the oracle may use it)

    @property
    def recompute_s(self) -> float:
        """Estimated time to prefill the program's context again."""
        v = self._recompute
        if callable(v):
            v = self._recompute = float(v())
        return v


class Retention(Protocol):
    """A tool-gap retention policy, built as ``cls(params, tool_stats)``. The simulator's
    :class:`ToolStats` keeps counts and sums (``mean``); a policy that reads ``quantile`` calls
    ``tool_stats.keep_samples()`` in its ``__init__``."""

    name: str

    def decide(self, r: Request, ctx: GapContext) -> Decision: ...


class _Stateless:
    """A policy that reads neither parameters nor tool statistics."""

    def __init__(self, params: NoParams | None = None, stats: ToolStats | None = None) -> None:
        pass


class Lru(_Stateless):
    """vLLM automatic prefix caching: free the blocks; they stay cached until the LRU reuses them."""

    name = "lru"

    def decide(self, r: Request, ctx: GapContext) -> Decision:
        return _RELEASE


class Evict(_Stateless):
    """Drop the program's KV at the end of every call (no reuse across tool calls; lower bound)."""

    name = "evict"

    def decide(self, r: Request, ctx: GapContext) -> Decision:
        return _DROP


@dataclass(frozen=True, slots=True)
class TtlParams:
    ttl_s: float = 5.0  #: static pin length, seconds

    def __post_init__(self) -> None:
        check(self.ttl_s >= 0, "ttl_s", self.ttl_s, ">= 0")


class StaticTtl:
    """Pin the program's KV for a fixed ``ttl_s`` after each call (agent-affinity / static TTL baseline)."""

    name = "ttl"

    def __init__(self, params: TtlParams, stats: ToolStats | None = None) -> None:
        self.ttl_s = params.ttl_s

    def decide(self, r: Request, ctx: GapContext) -> Decision:
        return Decision("pin", self.ttl_s, f"static ttl {self.ttl_s:g} s")


@dataclass(frozen=True, slots=True)
class ContinuumParams:
    continuum_variant: Literal["paper", "code"] = "paper"  #: TTL from the tool CDF, or the code's fixed pin
    continuum_quantile: float = 0.8  #: paper: TTL = this quantile of the tool's observed durations
    continuum_max_ttl_s: float = 30.0  #: paper: never pin longer than this, seconds
    continuum_code_pin_s: float = 2.0  #: code: pin length, seconds, when the tool's running mean <= it

    def __post_init__(self) -> None:
        check(self.continuum_variant in ("paper", "code"), "continuum_variant", self.continuum_variant, "paper or code")
        check(0 < self.continuum_quantile <= 1, "continuum_quantile", self.continuum_quantile, "in (0, 1]")
        check(self.continuum_max_ttl_s >= 0, "continuum_max_ttl_s", self.continuum_max_ttl_s, ">= 0")
        check(self.continuum_code_pin_s >= 0, "continuum_code_pin_s", self.continuum_code_pin_s, ">= 0")


class ContinuumTtl:
    """Continuum (arXiv 2511.02230): pin for a TTL chosen from the tool's duration distribution.

    ``paper`` variant: TTL = the ``continuum_quantile`` of the durations observed so far for this tool class,
    pinned only if at most ``continuum_max_ttl_s`` (a longer pin holds memory more than a recompute costs);
    no pin before 5 observations of the class. ``code`` variant (the authors' released vLLM fork): pin for
    a fixed ``continuum_code_pin_s`` (2 s) when the tool's running mean is at most that long, else release.
    The quantile and cap are our choices (the paper derives the TTL from the CDF without fixed numbers)."""

    name = "continuum"

    def __init__(self, params: ContinuumParams, stats: ToolStats) -> None:
        self.params = params
        self.stats = stats
        stats.keep_samples()  # (the paper variant's TTL is a quantile of the durations)

    def decide(self, r: Request, ctx: GapContext) -> Decision:
        cls = r.tool_class
        if self.params.continuum_variant == "code":
            mean = self.stats.mean(cls)
            if mean is not None and mean <= self.params.continuum_code_pin_s:
                return Decision("pin", self.params.continuum_code_pin_s, f"{cls} mean {mean:.2f} s")
            return Decision("release", reason=f"{cls} mean {mean}")
        if self.stats.count(cls) < 5:
            return Decision("release", reason=f"{cls}: too few observations")
        ttl = self.stats.quantile(cls, self.params.continuum_quantile)
        assert ttl is not None
        if ttl <= self.params.continuum_max_ttl_s:
            return Decision("pin", ttl, f"{cls} p{self.params.continuum_quantile * 100:.0f} = {ttl:.2f} s")
        return Decision("release", reason=f"{cls} ttl {ttl:.1f} s above cap")


class Offload(_Stateless):
    """LMCache-style: write the program's KV to host memory at the end of each call, reload on the next."""

    name = "offload"

    def decide(self, r: Request, ctx: GapContext) -> Decision:
        return Decision("offload") if ctx.swap_s is not None else Decision("release", reason="no host tier")


def _min_waste(gap_s: float, ctx: GapContext) -> Decision:
    """InferCept (Abhyankar et al., ICML 2024, §4) memory waste, in block-seconds, of each choice:
    preserve = gap x context blocks; discard = recompute time x blocks in use (the batch waits on the
    recompute); swap = swap out + in time x blocks in use (without InferCept's pipelining, an upper bound)."""
    preserve = gap_s * ctx.context_blocks
    discard = ctx.recompute_s * max(ctx.used_blocks, ctx.context_blocks)
    options = [(preserve, "pin"), (discard, "drop")]
    if ctx.swap_s is not None:
        options.append((ctx.swap_s * max(ctx.used_blocks, ctx.context_blocks), "offload"))
    _waste, action = min(options)
    return Decision(action, math.inf, f"waste preserve {preserve:.0f} discard {discard:.0f} -> {action}")  # type: ignore[arg-type]


class InferCept:
    """InferCept: per interception, the choice with the least estimated waste, the gap estimated as the
    running mean of the tool class (the paper profiles each augmentation type); no estimate -> discard."""

    name = "infercept"

    def __init__(self, params: NoParams, stats: ToolStats) -> None:
        self.stats = stats

    def decide(self, r: Request, ctx: GapContext) -> Decision:
        est = self.stats.mean(r.tool_class)
        if est is None:
            return Decision("release", reason="no estimate yet")
        return _min_waste(est, ctx)


class Oracle(_Stateless):
    """Knows the true gap and applies the same waste rule: a bound on what gap prediction can buy."""

    name = "oracle"

    def decide(self, r: Request, ctx: GapContext) -> Decision:
        d = _min_waste(ctx.true_gap_s, ctx)
        return Decision(d.action, ctx.true_gap_s if d.action == "pin" else math.inf, d.reason)


RETENTIONS: Registry[Retention] = Registry(
    "retention",
    [
        Entry("lru", Lru, NoParams, "free the blocks, cached until the LRU reuses them (vLLM prefix cache)"),
        Entry("evict", Evict, NoParams, "drop the KV at the end of every call"),
        Entry("ttl", StaticTtl, TtlParams, "pin for a fixed ttl_s"),
        Entry("continuum", ContinuumTtl, ContinuumParams, "pin for a TTL from the tool's duration CDF (Continuum)"),
        Entry("offload", Offload, NoParams, "write to host memory, reload on the next call (LMCache)"),
        Entry(
            "infercept", InferCept, NoParams, "least estimated memory waste of preserve / discard / swap (InferCept)"
        ),
        Entry("oracle", Oracle, NoParams, "InferCept's rule with the true tool duration (a bound)"),
    ],
)
