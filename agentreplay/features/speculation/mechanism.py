"""Speculative decoding as a mechanism (``[speculative]``, :mod:`agentreplay.features.speculation.speculative`):
every instance's pricer prices verification steps and the drafter, the engine schedules each turn's steps instead of
its tokens (the tables still count the trace's tokens), and a decode takes ``1 + k`` of a step's token budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentreplay.features.mechanism import Mechanism, Parts, Spec, View, Wiring
from agentreplay.features.speculation.speculative import draft_pricer, speculative_pricer, step_workload, summary

if TYPE_CHECKING:
    from agentreplay.perf.pricer import IterationPricer
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload


class Speculation(Mechanism):
    """``[speculative] method`` other than ``none`` (module docstring)."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.sc = cfg.speculative
        self.tokens: Workload | None = None  #: the workload the run replays (what the tables count)
        self.steps: Workload | None = None  #: what the engine schedules: 1 + S steps a turn

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Speculation | None:
        return cls(cfg) if cfg.speculative.enabled else None

    def pricer(self, base: IterationPricer, spec: Spec) -> IterationPricer:
        return speculative_pricer(base, self.sc, draft_pricer(self.cfg, spec))

    def wire(self, parts: Parts) -> Wiring:
        self.tokens = parts.workload
        self.steps = step_workload(parts.workload, self.sc, self.cfg.seed)
        # a decode takes 1 + k tokens of the step's budget, and of a MoE group step (vLLM Scheduler.schedule)
        return Wiring(steps=self.steps, decode_tokens=1 + self.sc.num_speculative_tokens)

    def summary(self, view: View) -> dict[str, Any]:
        assert self.tokens is not None and self.steps is not None
        return {"speculative": summary(self.tokens, self.steps, self.sc)}


MECHANISM = Speculation.from_config
