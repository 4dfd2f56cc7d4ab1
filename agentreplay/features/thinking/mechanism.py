"""The thinking budget as a mechanism: every turn's reasoning tokens capped before the cluster is sized
(:func:`agentreplay.features.thinking.budget.apply`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentreplay.features.mechanism import Mechanism, View
from agentreplay.features.thinking.budget import ThinkingStats, apply

if TYPE_CHECKING:
    from agentreplay.features.thinking.config import ThinkingConfig
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload


class Thinking(Mechanism):
    """``[thinking] budget_tokens`` set: the workload's outputs capped (:meth:`prepare`), what it changed in the
    summary's ``thinking`` section."""

    def __init__(self, cfg: ThinkingConfig) -> None:
        self.cfg = cfg
        self.stats: ThinkingStats | None = None

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Thinking | None:
        """On when ``[thinking] budget_tokens`` is set."""
        return cls(cfg.thinking) if cfg.thinking.enabled else None

    def prepare(self, workload: Workload) -> Workload:
        workload, self.stats = apply(workload, self.cfg)
        return workload

    def summary(self, view: View) -> dict[str, Any]:
        assert self.stats is not None
        return {"thinking": {"budget_tokens": self.cfg.budget_tokens, **self.stats.as_dict()}}


MECHANISM = Thinking.from_config
