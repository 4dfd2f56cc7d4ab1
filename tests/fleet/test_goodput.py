"""Task-level goodput and TTFT by step (agentreplay.fleet.goodput), hand-computed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentreplay.fleet.goodput import deadlines, goodput, goodput_curve, step_bin, ttft_by_step
from tests.fleet.helpers import turns_frame


def test_goodput_counts_removed_and_failed_programs_as_missed() -> None:
    jct = np.array([100.0, 250.0, 600.0, 50.0])
    assert goodput(jct, np.full(4, 250.0)) == {"attempted": 4, "met": 3, "goodput": 0.75}  # <= deadline meets
    assert goodput(jct, np.full(4, 250.0), removed=1) == {"attempted": 5, "met": 3, "goodput": 0.6}
    got = goodput(jct, np.full(4, 250.0), failed=np.array([False, False, False, True]))
    assert got == {"attempted": 4, "met": 2, "goodput": 0.5}


def test_relative_deadline_is_a_multiple_of_uncontended_jct() -> None:
    programs = pd.DataFrame({"uncontended_jct_s": [10.0, 40.0]})
    assert deadlines(programs, deadline_x=3).tolist() == [30.0, 120.0]
    assert deadlines(programs, deadline_s=60).tolist() == [60.0, 60.0]
    with pytest.raises(ValueError, match="exactly one"):
        deadlines(programs)
    with pytest.raises(ValueError, match="must be >= 1"):
        deadlines(programs, deadline_x=0.5)
    with pytest.raises(ValueError, match="must be > 0"):
        deadlines(programs, deadline_s=0)


def test_goodput_curve() -> None:
    curve = goodput_curve(np.array([20.0, 100.0]), np.array([10.0, 40.0]), np.array([1.0, 2.0, 2.5, 3.0]))
    assert curve["goodput"].tolist() == [0.0, 0.5, 1.0, 1.0]


def test_step_bins() -> None:
    labels = step_bin(np.array([1, 10, 11, 20, 21, 50, 51, 100, 101, 200, 201, 999]))
    assert labels.tolist() == [
        "1",
        "10",
        "11-20",
        "11-20",
        "21-50",
        "21-50",
        "51-100",
        "51-100",
        "101-200",
        "101-200",
        "201+",
        "201+",
    ]


def test_ttft_percentiles_by_step() -> None:
    rows = [{"program_id": f"p{i}", "turn_idx": 0, "ttft_s": float(i), "queued_s": 0.0} for i in range(1, 6)]
    rows += [
        {"program_id": f"p{i}", "turn_idx": t, "ttft_s": 100.0 + t, "queued_s": 1.0} for i in range(2) for t in (11, 14)
    ]
    t = ttft_by_step(turns_frame(rows))
    assert t["step"].tolist() == ["1", "11-20"]  # turn_idx 11 and 14 are steps 12 and 15
    assert t["turns"].tolist() == [5, 4]
    assert t["ttft_p50_s"].tolist() == pytest.approx([3.0, 112.5])  # 111, 111, 114, 114
    assert t["ttft_p99_s"].iloc[0] == pytest.approx(1 + 0.99 * 4)  # linear interpolation over 1..5
    assert t["queued_p50_s"].tolist() == [0.0, 1.0]
