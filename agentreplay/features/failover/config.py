"""``[failures]``: scheduled and random replica failures and drains (the failover mechanism's configuration).

Off by default (no events, no MTBF): the simulation then builds no failover controller and runs exactly as
before. The semantics are modelled in :mod:`agentreplay.features.failover.failover`.

TOML::

    [failures]
    events = [{instance = 1, at_s = 600, kind = "fail", recover_after_s = 300}]
    mtbf_s = 0          # random failures per instance (exponential, mean time between failures); 0 = none
    mttr_s = 300        # ... and mean time to repair (exponential)
    placement = "router"  # or "age-aware": re-routed programs oldest first, least-loaded instance with free KV
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from agentreplay.policy.registry import check

Kind = Literal["fail", "drain"]
Placement = Literal["router", "age-aware"]


def _check(cond: bool, name: str, value: Any, allowed: str) -> None:
    """:class:`ParamError` (``name = value is invalid: allowed``) unless ``cond``; building the section from a
    config (``sim.config``) turns it into a ``ConfigError`` naming ``[failures]``."""
    check(cond, name, value, allowed)


@dataclass(frozen=True, slots=True)
class FailureEvent:
    """One scheduled event: ``instance`` fails (loses its GPU: running and waiting requests aborted, every KV
    copy it held dropped) or starts draining (takes no new requests, finishes what it has, then goes down) at
    ``at_s`` simulated seconds; it is back, empty, ``recover_after_s`` seconds after it went down (None: never)."""

    instance: int
    at_s: float
    kind: Kind = "fail"
    recover_after_s: float | None = None

    def __post_init__(self) -> None:
        _check(isinstance(self.instance, int) and self.instance >= 0, "events.instance", self.instance, ">= 0")
        _check(math.isfinite(self.at_s) and self.at_s >= 0, "events.at_s", self.at_s, ">= 0 seconds")
        _check(self.kind in get_args(Kind), "events.kind", self.kind, f"one of {list(get_args(Kind))}")
        r = self.recover_after_s
        _check(r is None or (math.isfinite(r) and r >= 0), "events.recover_after_s", r, ">= 0 seconds, or unset")


def _event(e: Any) -> FailureEvent:
    if isinstance(e, FailureEvent):
        return e
    _check(isinstance(e, dict), "events", e, "a table {instance, at_s, kind, recover_after_s}")
    known = {"instance", "at_s", "kind", "recover_after_s"}
    unknown = sorted(set(e) - known)
    _check(not unknown, "events", e, f"unknown key(s) {unknown}; known: {sorted(known)}")
    _check("instance" in e and "at_s" in e, "events", e, "needs instance and at_s")
    _check(isinstance(e["at_s"], int | float), "events.at_s", e["at_s"], "a number of seconds")
    rec = e.get("recover_after_s")
    _check(rec is None or isinstance(rec, int | float), "events.recover_after_s", rec, "a number of seconds")
    return FailureEvent(
        instance=e["instance"],
        at_s=float(e["at_s"]),
        kind=e.get("kind", "fail"),
        recover_after_s=None if rec is None else float(rec),
    )


@dataclass(frozen=True, slots=True)
class FailureConfig:
    """Replica failures and drains (:mod:`agentreplay.features.failover.failover`). Default: none (the mechanism is
    off)."""

    events: tuple[FailureEvent, ...] = field(default_factory=tuple)  #: scheduled fails / drains
    mtbf_s: float = 0.0  #: random failures: mean time between failures per instance, seconds (0 = none)
    mttr_s: float = 300.0  #: random failures: mean time to repair, seconds (exponential)
    #: where re-routed calls go: "router" (the configured router, in abort order) or "age-aware" (oldest
    #: programs first, each to the least-loaded surviving instance with room for its prompt)
    placement: Placement = "router"

    def __post_init__(self) -> None:
        events = self.events
        _check(isinstance(events, list | tuple), "events", events, "an array of tables")
        object.__setattr__(self, "events", tuple(_event(e) for e in events))
        _check(math.isfinite(self.mtbf_s) and self.mtbf_s >= 0, "mtbf_s", self.mtbf_s, ">= 0 seconds (0 = none)")
        _check(math.isfinite(self.mttr_s) and self.mttr_s > 0, "mttr_s", self.mttr_s, "> 0 seconds")
        _check(
            self.placement in get_args(Placement), "placement", self.placement, f"one of {list(get_args(Placement))}"
        )

    @property
    def enabled(self) -> bool:
        return bool(self.events) or self.mtbf_s > 0


#: the config section this feature owns (agentreplay.features.registry)
CONFIG: dict[str, type] = {"failures": FailureConfig}
