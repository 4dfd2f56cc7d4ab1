"""KV footprint sampling: where each program's cache lives over time. See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="footprint",
    summary="KV footprint sampling: where each program's cache lives over time.",
    sections=("footprint",),
    config="agentreplay.features.footprint.config:CONFIG",
    mechanism="agentreplay.features.footprint.mechanism:MECHANISM",
    experiments=("agentreplay.features.footprint.experiment:EXPERIMENT",),
)
