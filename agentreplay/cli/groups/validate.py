"""The validation commands: fit the performance model to measured profiles, and compare the simulator with every
measured cell."""

from __future__ import annotations

from agentreplay.cli.groups.base import Group

validate_app = Group(
    "Validate",
    {"validate": "validate", "calibrate": "validate"},
    help="Validate the simulator against measurements and calibrate its performance model.",
)
