"""The live-engine commands: replay a trace against a running OpenAI-compatible server, or profile its
iterations."""

from __future__ import annotations

from agentreplay.cli.groups.base import Group

drive_app = Group(
    "Drive",
    {"drive": "drive", "drive-profile": "drive"},
    help="Drive and profile a live serving engine.",
)
