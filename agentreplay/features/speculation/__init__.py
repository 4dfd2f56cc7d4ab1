"""Speculative decoding: draft model / n-gram drafts verified per step. See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="speculation",
    summary="Speculative decoding: draft model / n-gram drafts verified per step.",
    sections=("speculative",),
    config="agentreplay.features.speculation.config:CONFIG",
    mechanism="agentreplay.features.speculation.mechanism:MECHANISM",
    experiments=("agentreplay.features.speculation.experiment:EXPERIMENT",),
)
