"""ThunderAgent's program-aware admission (an admission policy, :data:`agentreplay.router.admission.ADMISSIONS`).

Source: ThunderAgent (Kang et al., "ThunderAgent: A Simple, Fast and Program-Aware Agentic Inference System",
arXiv 2602.13692, §4 program-aware scheduler). Two versions of its router exist, chosen by ``[admission]
thunder_variant`` (:data:`ThunderVariant`):

- ``"released"`` (the default: what measured deployments run): github.com/ThunderAgent-org/ThunderAgent,
  ``main`` at a7eef77 (2026-03-06), modelled in :mod:`agentreplay.router.thunderagent_released` (its docstring
  cites each function): a periodic ``_scheduled_check`` every ``scheduler_interval``, the acting-token weight and
  ``2^(-t)`` decay, the BFD greedy resume in priority groups, the 1800 s forced resume, the shared-token discount.
- ``"original"``: the earlier github.com/HaoKang-Timmy/ThunderAgent, class :class:`ThunderAgent` below.

The ``original`` variant, with the function of ``ThunderAgent/scheduler/router.py`` ``MultiBackendRouter`` and
``ThunderAgent/backend/state.py`` ``BackendState`` it follows:

- **Program-level KV accounting** (``BackendState.active_program_tokens`` / ``remaining_capacity``): every
  admitted program counts its whole context, ``total_tokens``: a *reasoning* program (a call in flight) its
  prompt, an *acting* program (in a tool gap) prompt + output of its last call, weighted by
  ``thunder_acting_token_weight`` (the source's ``acting_token_weight``, 1.0) and by the acting decay below; plus
  ``BUFFER_PER_PROGRAM`` (100) tokens of decode headroom per admitted program. The capacity is the instances' KV
  capacity in tokens (``InstanceView.kv_capacity_tokens``, i.e. blocks x block size, which is the model's KV bytes
  per token x tokens against the KV memory) times ``thunder_capacity_fraction``.
- **Pause at admission** (``_select_backend_for_new_program``): a new program's first call enters only if no
  program is paused and the footprint plus its prompt and buffer fit; otherwise the program is paused and its call
  held at the front end.
- **Pause between turns** (``_pause_until_safe``): when the admitted footprint exceeds capacity, acting programs
  are paused, smallest first (their next call will be held), then reasoning programs are marked, smallest first,
  and paused when their call ends (``_mark_program_for_pause`` / ``_clear_mark_and_pause``).
- **Greedy resume** (``_greedy_resume``): paused programs are resumed, new programs first then the others, each
  group smallest first, while ``total_tokens + buffer`` fits in what is left.
- **Acting decay** ("exponential decay on acting tokens"): an acting program's tokens count
  ``x 0.5^(t / half_life)``, ``t`` the time since its call ended, ``thunder_half_life_s`` (0 = no decay; default
  1 s, which is the released ``2^(-t)``).
- **Forced resume** (``_wait_for_resume``): a held call that waited ``thunder_resume_timeout_s`` (source: 1800 s)
  is resumed whatever the capacity; a timer (``next_wake``) offers it at that moment.

Differences from the source, all because the simulator owns placement and clock: accounting is over the whole
cluster (ThunderAgent keeps one ledger per backend and also picks the backend; here the configured router
places calls); the pause / resume pass runs whenever a call ends (the moment capacity can free) and every
``thunder_recheck_s`` while calls are held; ``shared_tokens`` is not subtracted: each program counts its whole
context.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from agentreplay.policy.registry import check
from agentreplay.request import Request
from agentreplay.router.policies import InstanceView

#: Most points of the footprint time series kept in the summary (evenly thinned).
MAX_SERIES_POINTS = 400


#: Which ThunderAgent router the ``thunderagent`` admission follows (module docstring).
ThunderVariant = Literal["released", "original"]
#: The released router's shared-token discount (:mod:`.thunderagent_released`): ``off`` (what it runs: the
#: update is never called, ``shared_tokens`` stays 0) or ``kv-usage`` (vLLM's ``kv_cache_usage_perc`` formula).
ThunderSharedTokens = Literal["off", "kv-usage"]


@dataclass(frozen=True, slots=True)
class ThunderParams:
    """Parameters of both variants; each field says which variant reads it (``[admission]`` documents units)."""

    thunder_variant: ThunderVariant = "released"  #: which router (module docstring)
    thunder_capacity_fraction: float = 1.0  #: share of the KV capacity the admitted footprint may fill
    thunder_half_life_s: float = 1.0  #: acting footprint half-life, seconds (0 = no decay; released: 2^-t = 1 s)
    thunder_resume_timeout_s: float = 1800.0  #: forced resume after a call was held this long, seconds
    thunder_recheck_s: float = 5.0  #: original: pause / resume check period while calls are held, seconds
    thunder_buffer_tokens: int = 100  #: decode headroom per admitted program, tokens (BUFFER_PER_PROGRAM)
    thunder_scheduler_interval_s: float = 5.0  #: released: period of the scheduler check, seconds
    thunder_acting_token_weight: float = 1.0  #: weight of an acting program's tokens (acting_token_weight)
    thunder_acting_token_decay: bool = False  #: released: --use-acting-token-decay (resume capacity only)
    thunder_shared_tokens: ThunderSharedTokens = "off"  #: released: the shared-token discount
    thunder_pause_cooldown_s: float = 0.0  #: released: PAUSE_COOLDOWN, seconds (0: none, as released)
    thunder_resume_cooldown_s: float = 0.0  #: released: RESUME_COOLDOWN, seconds (0: none, as released)

    def __post_init__(self) -> None:
        v = self.thunder_variant
        check(v in get_args(ThunderVariant), "thunder_variant", v, f"one of {list(get_args(ThunderVariant))}")
        f = self.thunder_capacity_fraction
        check(0 < f <= 4, "thunder_capacity_fraction", f, "in (0, 4]")
        check(self.thunder_half_life_s >= 0, "thunder_half_life_s", self.thunder_half_life_s, ">= 0 (0 = no decay)")
        t = self.thunder_resume_timeout_s
        check(t > 0, "thunder_resume_timeout_s", t, "> 0 seconds")
        check(self.thunder_recheck_s > 0, "thunder_recheck_s", self.thunder_recheck_s, "> 0 seconds")
        check(self.thunder_buffer_tokens >= 0, "thunder_buffer_tokens", self.thunder_buffer_tokens, ">= 0")
        i = self.thunder_scheduler_interval_s
        check(0 < i < math.inf, "thunder_scheduler_interval_s", i, "> 0 seconds (finite)")
        w = self.thunder_acting_token_weight
        check(0 <= w < math.inf, "thunder_acting_token_weight", w, ">= 0 (finite; 1 = acting tokens count in full)")
        d = self.thunder_acting_token_decay
        check(isinstance(d, bool), "thunder_acting_token_decay", d, "true or false")
        sh = self.thunder_shared_tokens
        check(
            sh in get_args(ThunderSharedTokens),
            "thunder_shared_tokens",
            sh,
            f"one of {list(get_args(ThunderSharedTokens))}",
        )
        for name in ("thunder_pause_cooldown_s", "thunder_resume_cooldown_s"):
            c = getattr(self, name)
            check(0 <= c < math.inf, name, c, ">= 0 seconds (finite; 0 = no cooldown)")


@dataclass(slots=True)
class _Program:
    tokens: int  #: total_tokens: prompt (reasoning) or prompt + output of the last call (acting)
    acting: bool = False
    acting_since: float = 0.0  #: when its last call ended (acting)
    new: bool = True  #: no call of it has run yet
    marked: bool = False  #: reasoning, to be paused when its call ends


class PauseBook:
    """The pause / resume bookkeeping both ThunderAgent routers keep, over their ``active`` and ``paused``
    programs: a pause moves a program to ``paused`` (clearing its pause mark) and counts it, a resume moves it back
    and adds the time it spent paused to ``paused_s``."""

    active: dict[int, Any]
    paused: dict[int, Any]
    paused_at: dict[int, float]
    paused_s: dict[int, float]
    pauses: int

    def _pause(self, pid: int, now: float) -> None:
        prog = self.active.pop(pid)
        prog.marked = False
        self.paused[pid] = prog
        self.paused_at[pid] = now
        self.pauses += 1

    def _resume(self, pid: int, now: float) -> None:
        prog = self.paused.pop(pid)
        self.active[pid] = prog
        self.paused_s[pid] = self.paused_s.get(pid, 0.0) + now - self.paused_at.pop(pid)


class ThunderAgent(PauseBook):
    """Program-aware admission after ThunderAgent (module docstring)."""

    name = "thunderagent"

    def __init__(self, params: ThunderParams, ctx: object = None) -> None:
        self.p = params
        self.active: dict[int, _Program] = {}
        self.paused: dict[int, _Program] = {}
        self.paused_at: dict[int, float] = {}
        self.held_since: dict[int, float] = {}  #: program -> when its call was first held (this pause)
        self._sched_at = -1.0
        # metrics
        self.pauses = 0  #: pause events (a new program held at admission, an admitted program paused)
        self.forced_resumes = 0
        self.held_s: dict[int, float] = {}  #: program -> total seconds its calls waited at the front end
        self.paused_s: dict[int, float] = {}  #: program -> total seconds it spent paused
        self.series: list[tuple[float, float, int]] = []  #: (time, footprint tokens, paused programs)
        self.capacity_tokens = 0.0

    # ---- accounting ----------------------------------------------------------------------------------------
    def weight(self, prog: _Program, now: float) -> float:
        """The share of a program's tokens that counts: 1 reasoning; ``weight x 0.5^(t / half_life)`` acting."""
        if not prog.acting:
            return 1.0
        w = self.p.thunder_acting_token_weight
        h = self.p.thunder_half_life_s
        if h <= 0:
            return w
        return w * float(0.5 ** ((now - prog.acting_since) / h))

    def footprint(self, now: float) -> float:
        """Admitted programs' tokens (acting ones decayed) plus a buffer per admitted program."""
        used = 0.0
        for prog in self.active.values():
            used += prog.tokens * self.weight(prog, now)
        return used + len(self.active) * self.p.thunder_buffer_tokens

    def _capacity(self, instances: Sequence[InstanceView]) -> float:
        if not self.capacity_tokens:
            self.capacity_tokens = self.p.thunder_capacity_fraction * sum(i.kv_capacity_tokens() for i in instances)
        return self.capacity_tokens

    # ---- the pause / resume pass -----------------------------------------------------------------------------
    def schedule(self, instances: Sequence[InstanceView], now: float) -> None:
        """``_scheduled_check``: pause until within capacity, then resume greedily."""
        self._sched_at = now
        cap = self._capacity(instances)
        used = self.footprint(now)
        buf = self.p.thunder_buffer_tokens
        if used > cap:
            acting = sorted((pr.tokens, pid) for pid, pr in self.active.items() if pr.acting)
            for tokens, pid in acting:
                if used <= cap:
                    break
                used -= tokens * self.weight(self.active[pid], now) + buf
                self._pause(pid, now)
            if used > cap:
                reasoning = sorted(
                    (pr.tokens, pid) for pid, pr in self.active.items() if not pr.acting and not pr.marked
                )
                for tokens, pid in reasoning:
                    if used <= cap:
                        break
                    self.active[pid].marked = True  # paused when its call ends
                    used -= tokens + buf
        if self.paused:
            left = cap - used
            order = sorted(self.paused.items(), key=lambda kv: (not kv[1].new, kv[1].tokens, kv[0]))
            for pid, prog in order:
                need = prog.tokens + buf
                if left >= need:
                    self._resume(pid, now)
                    left -= need
        if not self.series or self.series[-1][0] != now:
            self.series.append((now, self.footprint(now), len(self.paused)))

    # ---- the admission hook ------------------------------------------------------------------------------------
    def admit(self, r: Request, instances: Sequence[InstanceView], now: float) -> bool:
        pid = r.program
        if now != self._sched_at:
            self.schedule(instances, now)
        prog = self.active.get(pid)
        if prog is None and pid in self.paused:
            since = self.held_since.setdefault(pid, now)
            if now < since + self.p.thunder_resume_timeout_s:
                return False
            self.forced_resumes += 1
            self._resume(pid, now)
            prog = self.active[pid]
        elif prog is None:  # a new program
            cap = self._capacity(instances)
            if self.paused or self.footprint(now) + r.prompt + self.p.thunder_buffer_tokens > cap:
                self.paused[pid] = _Program(r.prompt)
                self.paused_at[pid] = now
                self.held_since[pid] = now
                self.pauses += 1
                return False
            prog = self.active[pid] = _Program(r.prompt)
        since = self.held_since.pop(pid, -1.0)
        if since >= 0:
            self.held_s[pid] = self.held_s.get(pid, 0.0) + now - since
        prog.acting = False
        prog.new = False
        prog.tokens = r.prompt
        return True

    def finished(self, r: Request, now: float) -> None:
        """A call of an admitted program ended: the program acts (or is done, or is paused if marked)."""
        pid = r.program
        prog = self.active.get(pid)
        if prog is not None:
            if r.last:
                del self.active[pid]
            else:
                prog.acting, prog.acting_since = True, now
                prog.tokens = r.prompt + r.target_out
                if prog.marked:
                    self._pause(pid, now)
        self._sched_at = -1.0  # the next admission question re-runs the pass

    def next_wake(self, now: float) -> float:
        """When held calls should be offered again: the next periodic check, or an earlier forced resume."""
        t = now + self.p.thunder_recheck_s
        timeout = self.p.thunder_resume_timeout_s
        for since in self.held_since.values():
            t = min(t, since + timeout)
        return t

    # ---- metrics -----------------------------------------------------------------------------------------------
    def summary(self) -> dict[str, object]:
        return {
            "policy": self.name,
            "variant": "original",
            "capacity_tokens": self.capacity_tokens,
            "pauses": self.pauses,
            "forced_resumes": self.forced_resumes,
            **held_summary(self.held_s),
            "paused_s_total": sum(self.paused_s.values()),
            "footprint_peak_tokens": max((s[1] for s in self.series), default=0.0),
            "footprint_series": thin_series(self.series),
            "params": {
                "capacity_fraction": self.p.thunder_capacity_fraction,
                "half_life_s": self.p.thunder_half_life_s,
                "resume_timeout_s": self.p.thunder_resume_timeout_s,
                "recheck_s": self.p.thunder_recheck_s,
                "buffer_tokens": self.p.thunder_buffer_tokens,
                "acting_token_weight": self.p.thunder_acting_token_weight,
            },
        }


def held_summary(held_s: dict[int, float]) -> dict[str, object]:
    """Programs held at the front end and their total held seconds: count, total, mean, p50, p90, max."""
    held = sorted(held_s.values())
    n = len(held)
    return {
        "programs_held": n,
        "held_s_total": sum(held),
        "held_s_mean": sum(held) / n if n else 0.0,
        "held_s_p50": held[n // 2] if n else 0.0,  #: (upper median) of the programs that were held
        "held_s_p90": held[min(n - 1, int(0.9 * n))] if n else 0.0,
        "held_s_max": held[-1] if n else 0.0,
    }


def thin_series(series: list[tuple[float, float, int]]) -> list[list[float]]:
    """The footprint series as ``[time, footprint tokens, paused programs]`` rows, evenly thinned to at most
    :data:`MAX_SERIES_POINTS` (+ the last point)."""
    if len(series) > MAX_SERIES_POINTS:
        step = len(series) / MAX_SERIES_POINTS
        series = [series[int(i * step)] for i in range(MAX_SERIES_POINTS)] + [series[-1]]
    return [[t, f, k] for t, f, k in series]
