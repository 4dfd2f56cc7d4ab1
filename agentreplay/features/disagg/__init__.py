"""Prefill/decode disaggregation: separate pools and the KV hand-off between them. See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="disagg",
    summary="Prefill/decode disaggregation: separate pools and the KV hand-off between them.",
    sections=("disagg",),
    config="agentreplay.features.disagg.config:CONFIG",
    mechanism="agentreplay.features.disagg.mechanism:MECHANISM",
    experiments=("agentreplay.features.disagg.experiment:EXPERIMENT",),
)
