"""Instance failures, recovery and where the affected programs go. See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="failover",
    summary="Instance failures, recovery and where the affected programs go.",
    sections=("failures",),
    config="agentreplay.features.failover.config:CONFIG",
    mechanism="agentreplay.features.failover.mechanism:MECHANISM",
    experiments=("agentreplay.features.failover.experiment:EXPERIMENT",),
)
