"""Thinking-token budgets: reasoning tokens capped per turn (budget forcing). See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="thinking",
    summary="Thinking-token budgets: reasoning tokens capped per turn (budget forcing).",
    sections=("thinking",),
    config="agentreplay.features.thinking.config:CONFIG",
    mechanism="agentreplay.features.thinking.mechanism:MECHANISM",
    experiments=("agentreplay.features.thinking.experiment:EXPERIMENT",),
)
