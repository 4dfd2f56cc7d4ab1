"""``[thinking]``: the reasoning-token budget per turn (the rule and its sources:
:mod:`agentreplay.features.thinking.budget`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentreplay.sim.config_checks import check


def _check(cond: bool, name: str, value: Any, allowed: str) -> None:
    check(cond, "thinking", name, value, allowed)


@dataclass(frozen=True, slots=True)
class ThinkingConfig:
    """Reasoning-token cap per turn. Off by default (``budget_tokens`` unset)."""

    budget_tokens: int | None = None  #: reasoning tokens allowed per turn, tokens; unset = no cap
    reasoning_in_context: bool = False  #: earlier turns' thinking is in later prompts (thinking.budget)

    def __post_init__(self) -> None:
        b = self.budget_tokens
        if b is not None:
            _check(isinstance(b, int) and not isinstance(b, bool) and b >= 0, "budget_tokens", b, "an integer >= 0")
        v = self.reasoning_in_context
        _check(isinstance(v, bool), "reasoning_in_context", v, "true or false")

    @property
    def enabled(self) -> bool:
        return self.budget_tokens is not None


#: the config section this feature owns (agentreplay.features.registry)
CONFIG: dict[str, type] = {"thinking": ThinkingConfig}
