"""The trace commands: native agent trajectories and serving traces into the canonical trace, and what to learn
from one (a trace card, SQL, fitted tool durations, synthetic programs)."""

from __future__ import annotations

from agentreplay.cli.groups.base import Group

trace_app = Group(
    "Trace",
    {
        "collect": "collect",
        "describe": "describe",
        "synth": "tools",
        "fit-tools": "tools",
        "query": "query",
    },
    help="Collect, describe, query and synthesise canonical traces.",
)
