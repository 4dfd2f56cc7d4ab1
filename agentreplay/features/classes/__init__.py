"""Request classes, priorities and program admission (deadline, token-bucket, ...). See README.md in this folder."""

from agentreplay.features.base import Feature

FEATURE = Feature(
    name="classes",
    summary="Request classes, priorities and program admission (deadline, token-bucket, ...).",
    sections=("admission", "classes"),
    config="agentreplay.features.classes.config:CONFIG",
    mechanism="agentreplay.features.classes.mechanism:MECHANISM",
    experiments=(
        "agentreplay.features.classes.experiment_priority:EXPERIMENT",
        "agentreplay.features.classes.experiment_admission:EXPERIMENT",
    ),
)
