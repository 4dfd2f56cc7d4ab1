"""ThunderAgent's admission as its *released* router runs it (``[admission] thunder_variant = "released"``).

Source: github.com/ThunderAgent-org/ThunderAgent, branch ``main`` at a7eef77 (2026-03-06), files
``ThunderAgent/scheduler/router.py`` (``MultiBackendRouter``), ``ThunderAgent/backend/state.py``
(``BackendState``), ``ThunderAgent/backend/vllm_metrics.py`` (``VLLMMetricsClient``), ``ThunderAgent/config.py``
and ``ThunderAgent/__main__.py`` (CLI flags). What is modelled, with the function it follows:

- **Accounting** (``BackendState.remaining_capacity``): ``used = int(reasoning + acting_token_weight x acting)
  - shared_tokens + BUFFER_PER_PROGRAM x admitted programs``; ``reasoning`` / ``acting`` sum ``total_tokens`` of
  the admitted programs with a call in flight (its prompt: ``update_program_before_request``) / in a tool gap
  (prompt + output of its last call: ``update_program_after_request``). ``BUFFER_PER_PROGRAM = 100``
  (``thunder_buffer_tokens``); the file's ``DECODE_BUFFER = 512`` is never read. The capacity is the instances'
  KV tokens (``VLLMCacheConfig.total_tokens_capacity`` = block size x GPU blocks) x ``thunder_capacity_fraction``.
- **Admission of a new program** (``_select_backend_for_new_program``): its first call enters at once only if no
  program is paused and ``remaining >= prompt + buffer``; otherwise it joins the paused pool and waits.
- **Scheduler interval** (``_scheduler_loop``, ``Config.scheduler_interval`` / ``--scheduler-interval``, 5 s):
  the only place paused programs are resumed and admitted ones paused is ``_scheduled_check``, run every
  interval (sleep first): ticks at ``k x thunder_scheduler_interval_s``, k >= 1, from the start of the run. A call
  ending frees capacity but resumes nothing (``release_program``: "resume of waiting programs is handled by the
  scheduler"). Each check: fetch metrics, ``_greedy_resume``, then ``_pause_until_safe`` if ``remaining < 0``.
- **Pause** (``_pause_until_safe``): while ``remaining < 0``, pause the smallest acting program (it leaves the
  ledger; its next call waits); with none left, *mark* the smallest unmarked reasoning program, which is paused
  when its call ends (``_clear_mark_and_pause``). Marking does not change ``remaining_capacity`` (the
  ``future_paused_tokens`` it adds are read only by ``capacity_overflow``, which the scheduler never calls), so
  once the acting programs are gone every reasoning program is marked: reproduced as released.
- **Greedy resume** (``_greedy_resume``): the paused pool sorted by the tokens at pause (``PausedInfo``), split into
  reasoning (a call waiting, ``step_count > 1``), new (``step_count == 1``) and acting (no call waiting) programs,
  in that priority; step 1 takes each in turn whose ``total_tokens + buffer`` still fits in the remaining capacity
  (skipping those that do not); step 2 places them largest first (Best Fit Decreasing), stopping when the
  smallest no longer fits or the backend's remaining capacity drops to the buffer or below (:func:`bfd_resume`).
- **Acting weight and decay** (``--acting-token-weight``, 1.0; ``--use-acting-token-decay``, off): acting tokens
  count ``x acting_token_weight`` in every check; with decay on, the *resume* capacity
  (``remaining_capacity_with_decay``) counts each acting program's tokens ``x 2^(-t)`` instead, ``t`` the seconds
  since its call ended, and does not apply the weight; pausing keeps the undecayed figure. The ``2^(-t)`` is a
  1 s half-life: ``thunder_half_life_s`` (default 1.0) generalises it to ``2^(-t / half_life)``.
- **Forced resume** (``_wait_for_resume(timeout=1800.0)``): a call that has waited ``thunder_resume_timeout_s``
  since it began waiting is resumed whatever the capacity (``next_wake`` offers it at that moment).
- **Shared tokens** (``BackendState.update_shared_tokens`` -> ``VLLMMetricsClient.calculate_shared_tokens``):
  ``shared_tokens = max(0, reasoning - int(kv_cache_usage_perc x capacity))`` is subtracted in every check, but the
  released scheduler never calls the update (commented out in 8d0c8aa, "Keep shared_tokens = 0 for conservative
  capacity", removed in 485d4b1), so it stays 0: ``thunder_shared_tokens = "off"``. ``"kv-usage"`` enables the
  formula at each check (after its metrics fetch), vLLM's ``vllm:kv_cache_usage_perc`` standing as
  :meth:`InstanceView.kv_usage` (blocks held by requests / all blocks: cached free blocks count as free, as in
  vLLM's ``BlockPool.get_usage``), summed over instances as ``int(kv_usage x kv_capacity_tokens)`` each.
- **Cooldowns**: the released code has none. ``PAUSE_COOLDOWN = RESUME_COOLDOWN = 5.0`` existed on ``main`` from
  9ccbc4d to fadc27b (removed in 5850bc5, 2026-02-04; also on the unmerged 560788e): ``_enforce_capacity`` paused
  a further acting program in the same pass only if the pause cooldown had elapsed since the last pause (the first
  one always; reasoning programs are then marked, not subject to it), ``_try_resume_paused`` skipped a resume
  round within the resume cooldown of the last resume. ``thunder_pause_cooldown_s`` / ``thunder_resume_cooldown_s``
  reproduce that; their default 0 is the released behaviour.

Other versions: commit 560788e (2026-02-03, only on the branch of pull request #5, never merged into ``main``)
reserves ``DECODE_BUFFER = 256`` tokens a program and subtracts one system prompt estimated from the first
request's characters (``_estimate_system_prompt_tokens``, ``len // 5``) per admitted program beyond the first;
``main`` keeps ``_estimate_system_prompt_tokens`` but never calls it.

Not modelled (the simulator owns placement and knows tokens exactly): one ledger for the whole cluster (the
released router keeps one per backend and places new and resumed programs itself, BFD over backends; here the
configured router places calls, so BFD runs over one bin); ``total_tokens`` is the exact prompt, not the
``char_to_token_ratio`` estimate from the payload's characters, and it does not grow during decode
(``update_program_tokens_streaming``); the check takes no time. With ``"kv-usage"`` a check between two admission
hooks runs when the next hook (a call released or ended) comes, so it reads the KV usage of that moment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agentreplay.request import Request
from agentreplay.router.policies import InstanceView
from agentreplay.router.thunderagent import PauseBook, ThunderParams, held_summary, thin_series


def bfd_resume(candidates: Sequence[tuple[int, int]], remaining: float, buffer: int) -> list[int]:
    """``_greedy_resume`` over one bin: the ids to resume, in placement order.

    ``candidates``: ``(program, total_tokens)`` in priority order; each needs ``total_tokens + buffer``. Nothing
    if ``remaining <= buffer``. Step 1 selects, in order, every candidate that still fits in ``remaining`` summed
    with those selected before; step 2 places the selection largest first (stable), stopping when the smallest
    selected no longer fits or what is left drops to ``buffer`` or below, skipping one that does not fit."""
    if remaining <= buffer:
        return []
    chosen: list[tuple[int, int]] = []
    total = 0
    for pid, tokens in candidates:
        if total + tokens + buffer <= remaining:
            chosen.append((pid, tokens))
            total += tokens + buffer
    if not chosen:
        return []
    chosen.sort(key=lambda c: -c[1])
    smallest = chosen[-1][1] + buffer
    left = remaining
    out: list[int] = []
    for pid, tokens in chosen:
        if smallest > left:
            break
        if tokens + buffer > left:
            continue
        out.append(pid)
        left -= tokens + buffer
        if left <= buffer:  # the backend leaves the candidates: nothing more is placed
            break
    return out


@dataclass(slots=True)
class _Prog:
    seq: int  #: creation order (the router's ``programs`` dict order: ties in sorts)
    tokens: int  #: total_tokens: prompt (reasoning) or prompt + output of the last call (acting)
    turn: int  #: the call it last saw released (its step_count counts each call once)
    steps: int = 1  #: step_count: calls released so far
    acting: bool = False
    acting_since: float = 0.0  #: when its last call ended, seconds (acting)
    marked: bool = False  #: reasoning, paused when its call ends
    paused_tokens: int = 0  #: PausedInfo.total_tokens: tokens when it was paused (the pool's sort key)
    held_since: float = -1.0  #: when its pending call began to wait, seconds (-1: no call waiting)


class ThunderAgentReleased(PauseBook):
    """Program-aware admission after the released ThunderAgent router (module docstring)."""

    name = "thunderagent"

    def __init__(self, params: ThunderParams, ctx: object = None) -> None:
        self.p = params
        self.active: dict[int, _Prog] = {}  #: registered programs (on a backend)
        self.paused: dict[int, _Prog] = {}  #: the global waiting queue, in pause order
        self.paused_at: dict[int, float] = {}
        self.shared_tokens = 0
        self.capacity_tokens = 0.0
        self._instances: Sequence[InstanceView] = ()
        self._k = 1  #: the next scheduler check is at k x interval
        self._quiet = False  #: the last check changed nothing and the next ones cannot either until a hook
        self._blocked = False  #: the last check skipped a resume round for the cooldown
        self._seq = 0
        self._last_pause = -math.inf
        self._last_resume = -math.inf
        # metrics
        self.pauses = 0  #: pause events (a new program queued, an acting program paused, a marked one paused)
        self.marks = 0  #: reasoning programs marked for pause
        self.forced_resumes = 0
        self.checks = 0  #: scheduler checks run (those that could change nothing are skipped)
        self.held_s: dict[int, float] = {}  #: program -> total seconds its calls waited at the front end
        self.paused_s: dict[int, float] = {}  #: program -> total seconds it spent paused
        self.series: list[tuple[float, float, int]] = []  #: (time, used tokens, paused programs)
        self.peak_tokens = 0.0

    # ---- accounting (BackendState) -------------------------------------------------------------------------
    def decay(self, prog: _Prog, now: float) -> float:
        """``remaining_capacity_with_decay``'s factor of an acting program: ``2^(-t / half_life)``."""
        h = self.p.thunder_half_life_s
        return float(2.0 ** (-(now - prog.acting_since) / h)) if h > 0 else 1.0

    def used(self, now: float | None = None) -> int:
        """Tokens the admitted programs hold, as ``remaining_capacity`` counts them; given ``now``, as
        ``remaining_capacity_with_decay`` does (acting tokens decayed, not weighted)."""
        reasoning = 0
        acting = 0.0
        for prog in self.active.values():
            if not prog.acting:
                reasoning += prog.tokens
            elif now is None:
                acting += prog.tokens
            else:
                acting += prog.tokens * self.decay(prog, now)
        w = self.p.thunder_acting_token_weight if now is None else 1.0
        return int(reasoning + w * acting) - self.shared_tokens + len(self.active) * self.p.thunder_buffer_tokens

    def remaining(self, now: float | None = None) -> float:
        """``remaining_capacity`` (``now`` given: ``remaining_capacity_with_decay``); negative when over."""
        return self.capacity_tokens - self.used(now)

    def _capacity(self, instances: Sequence[InstanceView]) -> None:
        if not self.capacity_tokens:
            self.capacity_tokens = self.p.thunder_capacity_fraction * sum(i.kv_capacity_tokens() for i in instances)

    def _update_shared(self) -> None:
        """``update_shared_tokens``: reasoning tokens minus the KV tokens the engines report in use."""
        in_use = sum(int(i.kv_usage() * i.kv_capacity_tokens()) for i in self._instances)
        reasoning = sum(prog.tokens for prog in self.active.values() if not prog.acting)
        self.shared_tokens = max(0, reasoning - in_use)

    # ---- the scheduler check ---------------------------------------------------------------------------------
    def _catch_up(self, now: float) -> None:
        """Run the checks due at or before ``now``, each at its own time (they precede a hook at the same time).
        Checks that cannot change anything (``_quiet``) are skipped up to ``now``."""
        dt = self.p.thunder_scheduler_interval_s
        while self._k * dt <= now:
            if self._quiet:
                self._k = int(now // dt) + 1
                while self._k * dt <= now:
                    self._k += 1
                return
            self._quiet = self._check(self._k * dt)
            self._k += 1

    def _check(self, now: float) -> bool:
        """``_scheduled_check`` at ``now``; True when the next checks cannot change anything until a hook does
        (nothing changed, and the outcome does not depend on the time: no decay pending, no cooldown skipped,
        no metric read)."""
        self.checks += 1
        timed = self.p.thunder_shared_tokens != "off"
        if timed:
            self._update_shared()
        self._blocked = False
        changed = self._greedy_resume(now)
        if self.remaining() < 0:
            changed += self._pause_until_safe(now)
        self._record(now)
        timed = timed or self._blocked or (self.p.thunder_acting_token_decay and bool(self.paused))
        return not changed and not timed

    def _greedy_resume(self, now: float) -> int:
        """``_greedy_resume``: resume the paused programs :func:`bfd_resume` picks; returns how many."""
        if not self.paused:
            return 0
        if now - self._last_resume < self.p.thunder_resume_cooldown_s:
            self._blocked = True
            return 0
        left = self.remaining(now if self.p.thunder_acting_token_decay else None)
        order = bfd_resume(self._candidates(), left, self.p.thunder_buffer_tokens)
        for pid in order:
            self._resume(pid, now)
        if order:
            self._last_resume = now
        return len(order)

    def _candidates(self) -> list[tuple[int, int]]:
        """The paused pool by tokens at pause (stable: pause order), grouped reasoning, new, acting."""
        pool = sorted(self.paused.items(), key=lambda kv: kv[1].paused_tokens)
        new = [(pid, pr.tokens) for pid, pr in pool if pr.steps == 1]
        reasoning = [(pid, pr.tokens) for pid, pr in pool if pr.steps > 1 and not pr.acting]
        acting = [(pid, pr.tokens) for pid, pr in pool if pr.steps > 1 and pr.acting]
        return reasoning + new + acting

    def _pause_until_safe(self, now: float) -> int:
        """``_pause_until_safe``: pause acting programs smallest first while over capacity (one per check after
        the first within the pause cooldown), then mark every unmarked reasoning program (marks do not change the
        remaining capacity the loop reads). Returns the pauses and marks."""
        n = 0
        acting = sorted((pr.tokens, pr.seq, pid) for pid, pr in self.active.items() if pr.acting)
        for _, _, pid in acting:
            if self.remaining() >= 0:
                return n
            if n and now - self._last_pause < self.p.thunder_pause_cooldown_s:
                break
            self._pause(pid, now)
            self._last_pause = now
            n += 1
        if self.remaining() >= 0:
            return n
        for prog in self.active.values():
            if not prog.acting and not prog.marked:
                prog.marked = True
                self.marks += 1
                n += 1
        return n

    def _pause(self, pid: int, now: float) -> None:
        self.active[pid].paused_tokens = self.active[pid].tokens  # PausedInfo.total_tokens: the pool's sort key
        super()._pause(pid, now)

    def _record(self, now: float) -> None:
        used = float(self.used())
        self.peak_tokens = max(self.peak_tokens, used)
        point = (now, used, len(self.paused))
        if self.series and self.series[-1][0] == now:
            self.series[-1] = point
        else:
            self.series.append(point)

    # ---- the admission hook ------------------------------------------------------------------------------------
    def admit(self, r: Request, instances: Sequence[InstanceView], now: float) -> bool:
        """``update_program_before_request``: an admitted program's call enters; a paused program's call waits
        for a check to resume it or for the forced resume; a new program enters if nothing waits and it fits."""
        self._instances = instances
        self._capacity(instances)
        self._catch_up(now)
        pid = r.program
        prog = self.active.get(pid) or self.paused.get(pid)
        if prog is None:
            return self._arrive_new(r, now)
        if prog.turn != r.turn:  # this call's first offer: step_count += 1, total_tokens = its prompt
            self._quiet = False
            prog.turn, prog.steps, prog.tokens, prog.acting = r.turn, prog.steps + 1, r.prompt, False
            if pid in self.paused:
                prog.held_since = now
        if pid in self.paused:
            if now < prog.held_since + self.p.thunder_resume_timeout_s:
                return False
            self._quiet = False
            self.forced_resumes += 1
            self._resume(pid, now)
        return self._enter(pid, prog, now)

    def _arrive_new(self, r: Request, now: float) -> bool:
        self._quiet = False
        self._seq += 1
        prog = _Prog(self._seq, r.prompt, r.turn)
        if not self.paused and self.remaining() >= r.prompt + self.p.thunder_buffer_tokens:
            self.active[r.program] = prog
            return self._enter(r.program, prog, now)
        prog.paused_tokens = r.prompt
        prog.held_since = now
        self.paused[r.program] = prog
        self.paused_at[r.program] = now
        self.pauses += 1
        self._record(now)
        return False

    def _enter(self, pid: int, prog: _Prog, now: float) -> bool:
        if prog.held_since >= 0:
            self.held_s[pid] = self.held_s.get(pid, 0.0) + now - prog.held_since
            prog.held_since = -1.0
        self._record(now)
        return True

    def finished(self, r: Request, now: float) -> None:
        """``update_program_after_request``: the program acts with prompt + output tokens (paused if marked);
        its last call releases it (``release_program``). Nothing is resumed here: the next check does it."""
        self._catch_up(now)
        prog = self.active.get(r.program)
        if prog is None:
            return
        self._quiet = False
        if r.last:
            del self.active[r.program]
        else:
            prog.acting, prog.acting_since, prog.tokens = True, now, r.prompt + r.target_out
            if prog.marked:
                self._pause(r.program, now)
        self._record(now)

    def next_wake(self, now: float) -> float:
        """While calls are held: the next scheduler check after ``now``, or an earlier forced resume. (Every
        check, even one that may change nothing: a call entering without being held asks nothing, so a wake
        skipped now would not be asked for again.)"""
        dt = self.p.thunder_scheduler_interval_s
        k = self._k
        while k * dt <= now:
            k += 1
        t = k * dt
        timeout = self.p.thunder_resume_timeout_s
        for prog in self.paused.values():
            if prog.held_since >= 0:
                t = min(t, prog.held_since + timeout)
        return t

    # ---- metrics -----------------------------------------------------------------------------------------------
    def summary(self) -> dict[str, object]:
        p = self.p
        return {
            "policy": self.name,
            "variant": "released",
            "capacity_tokens": self.capacity_tokens,
            "pauses": self.pauses,
            "marks": self.marks,
            "forced_resumes": self.forced_resumes,
            "checks": self.checks,
            **held_summary(self.held_s),
            "paused_s_total": sum(self.paused_s.values()),
            "shared_tokens": self.shared_tokens,
            "footprint_peak_tokens": self.peak_tokens,
            "footprint_series": thin_series(self.series),
            "params": {
                "capacity_fraction": p.thunder_capacity_fraction,
                "scheduler_interval_s": p.thunder_scheduler_interval_s,
                "acting_token_weight": p.thunder_acting_token_weight,
                "acting_token_decay": p.thunder_acting_token_decay,
                "half_life_s": p.thunder_half_life_s,
                "resume_timeout_s": p.thunder_resume_timeout_s,
                "buffer_tokens": p.thunder_buffer_tokens,
                "shared_tokens": p.thunder_shared_tokens,
                "pause_cooldown_s": p.thunder_pause_cooldown_s,
                "resume_cooldown_s": p.thunder_resume_cooldown_s,
            },
        }
