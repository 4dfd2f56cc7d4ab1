"""A synthetic day of agent traffic on a large fleet. See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="day",
    summary="A synthetic day of agent traffic on a large fleet.",
    experiments=("agentreplay.features.day.experiment:EXPERIMENT",),
)
