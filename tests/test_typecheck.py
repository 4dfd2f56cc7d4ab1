"""The simulator's core type-checks with mypy (STYLE.md: "type-check the core with mypy"): the engine, the request
records, the policy registry and presets, the KV residency model, the scheduler, the router, the hardware model
and the simulator assembly. mypyc compiles the hot path from the same annotations (setup.py)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

CORE = [
    "agentreplay/engine.py",
    "agentreplay/request.py",
    "agentreplay/policy",
    "agentreplay/kv",
    "agentreplay/scheduler",
    "agentreplay/router",
    "agentreplay/perf",
    "agentreplay/sim",
]


@pytest.mark.slow
def test_the_core_type_checks() -> None:
    api = pytest.importorskip("mypy.api")
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), *(str(ROOT / p) for p in CORE)])
    assert status == 0, out + err
