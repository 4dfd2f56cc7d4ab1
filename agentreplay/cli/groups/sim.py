"""The simulate commands: replay a trace on a simulated cluster, once or many times (presets, sweeps, plans, the
design-space study), and the task-level view of a run."""

from __future__ import annotations

from agentreplay.cli.groups.base import Group

sim_app = Group(
    "Simulate",
    {
        "simulate": "sim",
        "catalog": "sim",
        "compare": "compare",
        "sweep": "sweep",
        "report": "sweep",
        "plan": "plan",
        "study": "study",
        "tasks": "tasks",
    },
    help="Simulate a trace on a cluster, compare presets, sweep, plan and study.",
)
