"""The bundled dataset equals, row for row, what the collector produces from ../shared."""

from __future__ import annotations

import json

import pandas as pd

from agentreplay.trace.io import read_trace
from collectors.registry import collect
from tests.conftest import ROOT, shared_path

BUNDLED = ROOT / "datasets" / "swebench-verified"


def test_bundled_trace_is_valid_and_matches_manifest() -> None:
    trace = read_trace(BUNDLED)
    manifest = json.loads((BUNDLED / "MANIFEST.json").read_text())
    assert manifest["counts"]["programs"] == len(trace.programs) == 500
    assert manifest["counts"]["turns"] == len(trace.turns) == 20_163
    assert manifest["counts"]["input_tokens"] == int(trace.turns["input_tokens"].sum()) == 333_047_929
    assert manifest["counts"]["output_tokens"] == int(trace.turns["output_tokens"].sum()) == 5_556_752


def test_bundled_equals_fresh_collect(tmp_path) -> None:
    src = shared_path("datasets", "swebench-verified-mini-swe-agent", "trajs")
    collect("mini-swe-agent", src, tmp_path)
    fresh, bundled = read_trace(tmp_path), read_trace(BUNDLED)
    pd.testing.assert_frame_equal(fresh.programs, bundled.programs)
    pd.testing.assert_frame_equal(fresh.turns, bundled.turns)
