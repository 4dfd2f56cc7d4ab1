"""The live-engine cell group of the validation report is built from the comparison JSON, not typed in."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from validation.e2e.live import METRICS, rows


def test_rows_from_the_committed_live_run() -> None:
    path = ROOT / "reports" / "live" / "vllm-cpu-ci.json"
    data = json.loads(path.read_text())
    df = rows([path])
    assert set(df["metric"]) == {m for m in METRICS if data["comparison"]["rows"][m]["real"]}
    for r in df.itertuples():
        src = data["comparison"]["rows"][r.metric]
        assert (r.measured, r.simulated) == (src["real"], src["sim"])
    assert (df["role"] == "validation").all() and (df["source"] == "live-vllm-cpu").all()


def test_bad_live_file_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match=r"x\.json: not a live comparison file"):
        rows([bad])
