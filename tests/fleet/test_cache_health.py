"""Per-session cache health (agentreplay.fleet.cache_health): reuse-hit shares, collapses and their causes on a
hand-made output."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentreplay.fleet.cache_health import UNKNOWN, Collapse, collapsed_programs, collapses, health_by_step, turn_health
from tests.fleet.helpers import turns_frame


def _t(pid: str, idx: int, inp: int, cached: int, **kw) -> dict:
    return {"program_id": pid, "turn_idx": idx, "input_tokens": inp, "output_tokens": 10, "cached_tokens": cached, **kw}


TURNS = turns_frame(
    [
        _t("A", 0, 1000, 0),
        _t("A", 1, 1100, 1000),
        _t("A", 2, 1200, 100, instance=1),  # moved to instance 1: routing miss
        _t("A", 3, 1300, 1200, instance=1),
        _t("A", 4, 1400, 0, instance=1, reloaded_dram_tokens=1300),  # came back from DRAM
        _t("B", 0, 2000, 0),
        _t("B", 1, 2100, 2000, finish_s=20.0),
        _t("B", 2, 2200, 16, release_s=50.0, queued_s=5.0),  # idle 35 s, then a miss
        _t("C", 0, 500, 0),
        _t("C", 1, 600, 500),
        _t("C", 2, 700, 0, preemptions=1),
        _t("D", 0, 500, 0),
        _t("D", 1, 600, 500, finish_s=1.0),
        _t("D", 2, 700, 100, release_s=11.0),
        _t("E", 0, 500, 0),
        _t("E", 1, 505, 0),  # nothing reusable beyond one block: undefined, never a collapse
    ]
)
DECISIONS = pd.DataFrame(
    [
        {"event": "retention", "program_id": "B", "turn": 1, "action": "release", "ttl_s": float("inf")},
        {"event": "retention", "program_id": "C", "turn": 1, "action": "drop", "ttl_s": 0.0},
        {"event": "retention", "program_id": "D", "turn": 1, "action": "pin", "ttl_s": 5.0},
        {"event": "route", "program_id": "D", "turn": 2, "action": None, "ttl_s": None},
    ]
)


def test_reuse_hit_is_hits_over_the_tokens_extending_the_previous_context() -> None:
    h = turn_health(TURNS)
    a = h[h["program_id"] == "A"]
    assert np.isnan(a["reuse_hit"].iloc[0])
    assert a["reuse_hit"].iloc[1:].tolist() == pytest.approx([1000 / 1010, 100 / 1110, 1200 / 1210, 0.0])
    assert a["hit_share"].iloc[1] == pytest.approx(1000 / 1100)
    assert a["moved"].tolist() == [False, False, True, False, False]
    assert a["reload_share"].iloc[4] == pytest.approx(1300 / 1400)
    assert h.loc[h["program_id"] == "B", "idle_s"].iloc[2] == 35.0
    e = h[h["program_id"] == "E"]
    assert e["reusable_tokens"].iloc[1] == 505 and e["reuse_hit"].iloc[1] == 0.0
    # with 1,024-token blocks only A's turns 3-5 and B's turns 2-3 reuse a whole block
    assert turn_health(TURNS, block_size=1024)["reuse_hit"].notna().sum() == 5


def test_collapse_causes_without_a_decision_log() -> None:
    ev = collapses(turn_health(TURNS), Collapse())
    got = dict(zip(zip(ev["program_id"], ev["step"], strict=True), ev["cause"], strict=True))
    assert got == {
        ("A", 3): "routing miss",
        ("A", 5): "reload from lower tier",
        ("B", 3): UNKNOWN,
        ("C", 3): "preemption",
        ("D", 3): UNKNOWN,
    }
    assert ev.loc[ev["program_id"] == "A", ["instance_before", "instance"]].iloc[0].tolist() == [0, 1]


def test_collapse_causes_from_the_decision_log() -> None:
    ev = collapses(turn_health(TURNS), Collapse(), DECISIONS)
    got = dict(zip(ev["program_id"] + ev["step"].astype(str), ev["cause"], strict=True))
    assert got == {
        "A3": "routing miss",
        "A5": "reload from lower tier",
        "B3": "evicted while idle (LRU)",
        "C3": "dropped at tool gap",
        "D3": "TTL expiry while idle",
    }  # D idle 10 s > its 5 s pin
    pinned = DECISIONS.assign(ttl_s=[np.inf, 0.0, 60.0, None])
    ev2 = collapses(turn_health(TURNS), Collapse(), pinned)
    assert ev2.loc[ev2["program_id"] == "D", "cause"].item() == "evicted while pinned (unpinned under pressure)"


def test_collapse_cause_from_the_failover_ledger() -> None:
    """A call the failover ledger lists (its instance failed or drained) is a replica failure first, before the
    routing miss it also looks like (A's turn 2 moved because instance 0 failed) and before the decision log;
    ledger rows of turns that did not collapse change nothing."""
    ledger = pd.DataFrame(
        [
            {"program_id": "A", "turn": 2, "event": "fail"},
            {"program_id": "B", "turn": 2, "event": "drain"},
            {"program_id": "E", "turn": 1, "event": "fail"},
        ]
    )
    ev = collapses(turn_health(TURNS), Collapse(), DECISIONS, ledger)
    got = dict(zip(ev["program_id"] + ev["step"].astype(str), ev["cause"], strict=True))
    assert got == {
        "A3": "replica fail",
        "A5": "reload from lower tier",
        "B3": "replica drain",
        "C3": "dropped at tool gap",
        "D3": "TTL expiry while idle",
    }


def test_thresholds() -> None:
    assert collapses(turn_health(TURNS), Collapse(above=0.996, below=0.5)).empty  # none was that high (B: 0.99502)
    assert len(collapses(turn_health(TURNS), Collapse(above=0.8, below=0.05))) == 3  # only the near-total misses
    with pytest.raises(ValueError, match="need 0 <= below <= above <= 1"):
        Collapse(above=0.4, below=0.5)


def test_collapsed_programs_and_step_table() -> None:
    ev = collapses(turn_health(TURNS), Collapse())
    cp = collapsed_programs(ev).set_index("program_id")
    assert cp.loc["A", "collapses"] == 2 and cp.loc["A", "first_cause"] == "routing miss"
    assert cp.loc["A", "causes"] == "reload from lower tier, routing miss"
    steps = health_by_step(turn_health(TURNS), Collapse()).set_index("step")
    assert steps.loc["1", "turns"] == 5 and np.isnan(steps.loc["1", "reuse_hit_mean"])
    assert steps.loc["3", "share_below"] == pytest.approx(1.0)  # A, B, C, D all below 0.5 at step 3
    assert steps.loc["2", "share_below"] == pytest.approx(1 / 5)  # E's 0 of 505
