"""Data-parallel MoE groups stepping in lockstep (DP x EP deployments). See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="dp",
    summary="Data-parallel MoE groups stepping in lockstep (DP x EP deployments).",
    mechanism="agentreplay.features.dp.mechanism:MECHANISM",
)
