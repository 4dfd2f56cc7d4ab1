"""The house style is checked, not hoped for: ``ruff check`` (the rules in pyproject.toml) and ``ruff format
--check`` over the project. The test dependencies pin ruff's minor version, whose formatting is stable within it;
a new minor version is adopted by bumping the pin and running ``ruff format .`` in one commit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ruff")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "ruff", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint_is_clean() -> None:
    r = _ruff("check", "--no-cache", ".")
    if r.returncode not in (0, 1):
        pytest.fail(f"ruff did not run: {r.stderr}")
    assert r.returncode == 0, r.stdout[-4000:]


def test_ruff_format_leaves_every_file_unchanged() -> None:
    r = _ruff("format", "--check", "--no-cache", ".")
    if r.returncode not in (0, 1):
        pytest.fail(f"ruff did not run: {r.stderr}")
    assert r.returncode == 0, "run `ruff format .`:\n" + r.stdout[-4000:]


#: the longest module the project keeps: past it, a module holds more than one job and is split
MAX_MODULE_LINES = 500


def test_no_module_is_longer_than_the_limit() -> None:
    """Every Python file of the project (package, validation, collectors, benchmarks, tests, docs hooks) has at
    most :data:`MAX_MODULE_LINES` lines; function complexity is ruff's C901 rule (pyproject.toml)."""
    skip = {".venv", "build", ".git", "node_modules"}
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if not skip.intersection(p.relative_to(ROOT).parts)
        and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them): {long}"
