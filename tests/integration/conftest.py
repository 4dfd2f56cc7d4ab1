"""Integration tests (a real engine, minutes each): registered here, and skipped unless asked for.

Run them with ``pytest -m integration tests/integration`` (or ``AGENTREPLAY_INTEGRATION=1``); a plain ``pytest``
keeps the main suite fast. The marker is registered here so ``--strict-markers`` accepts it without a
pyproject entry.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: runs a real engine (minutes); opt in with -m integration")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "integration" in (config.getoption("markexpr", "") or "") or os.environ.get("AGENTREPLAY_INTEGRATION"):
        return
    skip = pytest.mark.skip(reason="integration test: run with `-m integration` (after `bash .ci/vllm_cpu.sh`)")
    for item in items:
        if item.get_closest_marker("integration") is not None:
            item.add_marker(skip)
