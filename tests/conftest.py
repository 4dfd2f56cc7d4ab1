"""Shared fixtures: where the real data lives (../shared beside the project) and skip rules when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
MSWEA_TRAJS = SHARED / "datasets" / "swebench-verified-mini-swe-agent" / "trajs"


def shared_path(*parts: str) -> Path:
    """A path under ../shared; the test is skipped when it does not exist (e.g. a clone without the data)."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"real data not available: {p}")
    return p
