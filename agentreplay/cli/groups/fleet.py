"""The fleet group: ``agentreplay fleet NAME``, one command per registered experiment
(:mod:`agentreplay.experiment.registry`; the commands: :mod:`agentreplay.cli.fleet`)."""

from __future__ import annotations

from agentreplay.cli.groups.base import Group

fleet_app = Group(
    "Fleet",
    {"fleet": "fleet"},
    name="fleet",
    help="Run a study: labelled variants of a configuration on a trace, then its tables and figures.\n\n"
    "Every study runs its cells (variant x seed) in parallel (--workers, or a Dask cluster with --dask) and keeps "
    "each finished cell in OUT/sim-runs/, so rerunning the same command resumes. The output folder holds the "
    "tables (NAME.parquet), the Markdown and the figures of the study.\n\n"
    "Example: agentreplay fleet thinking --loads 4,64 --workers 2",
)
