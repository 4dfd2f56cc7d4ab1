"""Shared by the experiment tests: a tiny trace on disk and ``agentreplay fleet NAME`` run in this process."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from agentreplay.cli import app
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "datasets" / "swebench-verified"
runner = CliRunner()


def tiny_trace(folder: Path, programs: Sequence[Sequence[tuple[int, int, float | None]]] | None = None) -> Path:
    """``folder`` holding a canonical trace: by default three programs of three short turns."""
    write_trace(folder, make_trace(programs or [[(300 + 40 * t, 12, 0.3) for t in range(3)] for _ in range(3)]))
    return folder


def fleet(name: str, *args: str, workers: int = 1) -> Result:
    """``agentreplay fleet NAME ARGS --workers N`` (in this process by default)."""
    return runner.invoke(app, ["fleet", name, *args, "--workers", str(workers)], env={"COLUMNS": "250"})


def fleet_json(name: str, *args: str) -> dict[str, Any]:
    """The ``--json`` document of a run that must succeed."""
    res = fleet(name, *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)  # type: ignore[no-any-return]
