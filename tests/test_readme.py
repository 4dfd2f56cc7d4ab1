"""The README is the front door: short, its two commands exactly what CI and the main job run, its links alive,
and every ``agentreplay`` command it shows a real command with real options."""

from __future__ import annotations

import importlib
import re

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
#: the main job and the test suite, character for character (.ci/run and CI depend on them)
MAIN_JOB = (
    'python3 -m venv .venv && . .venv/bin/activate && pip install -q -e ".[test]" && '
    "agentreplay validate --out reports/latest"
)
TEST_SUITE = "bash .ci/run"


def _bash_lines() -> list[str]:
    return [ln for block in re.findall(r"```bash\n(.*?)```", README, re.S) for ln in block.splitlines()]


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 150


def test_the_two_commands_are_there_verbatim() -> None:
    lines = _bash_lines()
    assert MAIN_JOB in lines
    assert TEST_SUITE in lines


def test_ci_runs_the_install_the_main_job_runs() -> None:
    """``.ci/run`` installs exactly as the main job does, then runs the suite."""
    ci = (ROOT / ".ci" / "run").read_text()
    install = MAIN_JOB.split(" && agentreplay ")[0]
    assert f"{install} && python -m pytest -q" in ci


def test_every_relative_link_of_the_readme_exists() -> None:
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not re.match(r"^[a-z]+:", t)]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert missing == [], f"README links to missing files: {missing}"


def test_every_command_the_readme_shows_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "hooks"))
    gen_cli = importlib.import_module("gen_cli")
    assert gen_cli.check(README, gen_cli.commands()) == []
