"""Golden test: every simulated number of the bundled trace under every preset (and a few mechanisms no preset
reaches) is pinned in ``expected.json``; the validation computations that take seconds in
``expected_validation.json``. A refactoring must leave both unchanged.

If this fails after a change that was MEANT to move simulated numbers, regenerate with
``python -m tests.golden.regen`` (``--validation`` for the second file) and say so in the commit message; never
regenerate to make a refactoring pass. The failure names the case, table and column (or summary field) that moved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_path
from tests.golden.cases import EXPECTED, EXPECTED_VALIDATION, cases, run_case, validation_digest

EXPECTED_DATA: dict[str, Any] = json.loads(EXPECTED.read_text())


def differences(expected: Any, got: Any, path: str = "") -> list[str]:
    """Every leaf where ``got`` differs from ``expected``, as ``path: expected -> got``."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(expected) | set(got), key=str):
            if k not in got:
                out.append(f"{path}/{k}: missing")
            elif k not in expected:
                out.append(f"{path}/{k}: unexpected ({got[k]!r})")
            else:
                out += differences(expected[k], got[k], f"{path}/{k}")
        return out
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [
            d for i, (e, g) in enumerate(zip(expected, got, strict=True)) for d in differences(e, g, f"{path}[{i}]")
        ]
    return [] if expected == got else [f"{path}: {expected!r} -> {got!r}"]


def test_every_preset_has_a_golden_case() -> None:
    from agentreplay.policy.presets import PRESETS

    assert {f"preset:{p}" for p in PRESETS} <= set(cases())
    assert set(EXPECTED_DATA) == set(cases()), "cases changed: regenerate (python -m tests.golden.regen)"


def test_differences_names_the_changed_leaf() -> None:
    assert differences({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}) == ["/a/b[1]: 2 -> 3"]
    assert differences({"a": 1}, {"a": 1}) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED_DATA))
def test_golden_case(name: str, tmp_path: Path) -> None:
    got = run_case(name, tmp_path)
    exp = EXPECTED_DATA[name]
    assert got["command"] == exp["command"] and got["config"] == exp["config"], "case definition changed"
    diff = differences(exp["digest"], got["digest"])
    assert not diff, f"golden case {name}: {len(diff)} output(s) changed:\n" + "\n".join(diff[:40])


@pytest.mark.slow
@pytest.mark.shared
def test_golden_validation() -> None:
    shared_path("measurements")
    diff = differences(json.loads(EXPECTED_VALIDATION.read_text()), validation_digest())
    assert not diff, f"validation digest: {len(diff)} value(s) changed:\n" + "\n".join(diff[:40])
