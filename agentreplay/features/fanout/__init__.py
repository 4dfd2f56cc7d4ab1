"""Fan-out workflows: programs that spawn sub-agents (DAG traces). See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="fanout",
    summary="Fan-out workflows: programs that spawn sub-agents (DAG traces).",
    experiments=("agentreplay.features.fanout.experiment:EXPERIMENT",),
)
