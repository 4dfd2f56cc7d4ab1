"""A step's plan (:class:`StepPlan`, what :meth:`agentreplay.scheduler.scheduler.Scheduler.schedule` decides and
the instance prices and applies), and taking a request back out of it (:func:`unschedule`).

vLLM's priority mode (``--scheduling-policy priority``) picks its preemption victim from the whole running list
(``max(self.running, key=lambda r: (r.priority, r.arrival_time))`` in ``Scheduler.schedule``), so the victim may be
a request already scheduled earlier in the same step. vLLM then takes it back out of the step: its scheduled tokens
return to the token budget (``token_budget += num_scheduled_tokens.pop(...)``) and its blocks, including the ones
``allocate_slots`` gave it for this step, are freed with it (``_preempt_request``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentreplay.request import Request

StopReason = Literal["empty", "max_seqs", "no_budget", "no_blocks", "preempted"]


@dataclass(slots=True)
class StepPlan:
    """One iteration: prefill chunks ``(request, tokens, computed_before)``, decoding requests outside the
    cohort, and ``cohort``: how many cohort members decode (all of them, or none)."""

    prefill: list[tuple[Request, int, int]] = field(default_factory=list)
    decode: list[Request] = field(default_factory=list)
    cohort: int = 0
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    loading: list[Request] = field(default_factory=list)  #: admitted to load their KV first (they stay waiting)
    stop: StopReason = "empty"

    # written out, not left to @dataclass: mypyc compiles this one; the dataclass-generated __init__ runs
    # interpreted (tests/sim/test_native.py checks it against the fields)
    def __init__(
        self,
        prefill: list[tuple[Request, int, int]] | None = None,
        decode: list[Request] | None = None,
        cohort: int = 0,
        preempted: list[Request] | None = None,
        admitted: list[Request] | None = None,
        loading: list[Request] | None = None,
        stop: StopReason = "empty",
    ) -> None:
        self.prefill = [] if prefill is None else prefill
        self.decode = [] if decode is None else decode
        self.cohort = cohort
        self.preempted = [] if preempted is None else preempted
        self.admitted = [] if admitted is None else admitted
        self.loading = [] if loading is None else loading
        self.stop = stop

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode and not self.cohort


def unschedule(prefill: list[tuple[Request, int, int]], decode: list[Request], r: Request, decode_tokens: int) -> int:
    """Take ``r`` out of a step's ``prefill`` chunks or ``decode`` list; returns the tokens it had taken from the
    budget. ``r.computed`` counts the step's tokens, so that freeing it returns exactly the blocks allocated for them
    (and, as vLLM, which caches a chunk's full blocks when it allocates them, keeps their prefix identity). With
    speculative decoding a decode gives back ``decode_tokens``, even where the budget had cut its drafts."""
    for k in range(len(prefill)):
        x, n, _ = prefill[k]
        if x is r:
            del prefill[k]
            r.computed += n
            return n
    for k in range(len(decode)):
        if decode[k] is r:
            del decode[k]
            r.computed += 1
            return decode_tokens
    raise ValueError(f"request of program {r.program}, turn {r.turn_idx} is not scheduled in this step")
