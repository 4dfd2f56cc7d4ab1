"""Fixtures for the sweep tests: a tiny canonical trace on disk and spec files that point at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentreplay.sweep import LocalExecutor
from agentreplay.trace.io import write_trace
from tests.factories import make_trace


@pytest.fixture(scope="session")
def tiny_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six programs of 2-4 turns, prompts up to ~3,000 tokens (189 blocks of 16), tool gaps of 0.5-3 s."""
    programs = [
        [(1000 + 200 * p + 400 * t, 50 + 10 * t, 0.5 + 0.5 * ((p + t) % 4)) for t in range(2 + p % 3)] for p in range(6)
    ]
    d = tmp_path_factory.mktemp("tiny-trace")
    write_trace(d, make_trace(programs, shared_prefix_tokens=300))
    return d


def write_spec(path: Path, trace: Path, body: str, seeds: str = "[0]") -> Path:
    """A spec file with ``[sweep]`` pointing at ``trace`` and the given tables after it."""
    path.write_text(f'[sweep]\ntrace = "{trace}"\nseeds = {seeds}\n\n{body}')
    return path


BASE = """
[base]
hardware = { gpu = "h100-sxm", model = "llama-3.1-8b", instances = 2 }
tools = { mode = "scale" }
"""

#: 8 cells: load x router x tool scale
GRID = (
    BASE
    + """
[grid]
"workload.concurrency" = [2, 4]
"router.policy" = ["round-robin", "least-loaded"]
"tools.scale" = [0.5, 1]
"""
)


@pytest.fixture(scope="session")
def pool() -> Iterator[LocalExecutor]:
    """One 2-process pool for the tests that call the Python API (a pool's start-up is the slow part)."""
    with LocalExecutor(2) as ex:
        yield ex


@pytest.fixture(scope="session")
def local_sweep(tiny_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The 8-cell GRID run once through the CLI on 2 local workers: (spec file, output folder). Read-only:
    a test that changes the folder works on a copy."""
    import agentreplay.cli.sweep  # noqa: F401  (registers `sweep` on the app)
    from agentreplay.cli.app import app

    d = tmp_path_factory.mktemp("local")
    spec = write_spec(d / "spec.toml", trace=tiny_trace, body=GRID)
    result = CliRunner().invoke(app, ["sweep", str(spec), "--out", str(d / "out"), "--workers", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    return spec, d / "out"
