"""Uncontended JCT (agentreplay.fleet.uncontended): hand-computed on a stub pricer, and equal to the simulator's own
JCT for a program that runs alone."""

from __future__ import annotations

import numpy as np
import pytest

from agentreplay.fleet.uncontended import history_hits, uncontended
from agentreplay.sim import SimConfig, simulate
from tests.factories import make_trace
from tests.fleet.helpers import turns_frame


class StubPricer:
    """An iteration costs 10 ms + 1 ms per new token + 0.1 ms per cached token per prefill item; a decode-only
    step of one sequence 20 ms + 0.01 ms per context token."""

    def iteration_time_s(self, prefill, decode_ctx) -> float:
        assert not decode_ctx
        return sum(0.010 + 0.001 * item[0] + 0.0001 * item[1] for item in prefill)

    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]:
        assert n_seqs == 1
        return 0.020, 0.00001


TURNS = turns_frame(
    [
        {"program_id": "P", "turn_idx": 0, "input_tokens": 100, "output_tokens": 3, "tool_s": 5.0},
        {"program_id": "P", "turn_idx": 1, "input_tokens": 150, "output_tokens": 1, "tool_s": float("nan")},
        {"program_id": "Q", "turn_idx": 0, "input_tokens": 20, "output_tokens": 2, "tool_s": 1.5},
        {"program_id": "Q", "turn_idx": 1, "input_tokens": 40, "output_tokens": 1, "tool_s": 9.0},  # last: not counted
    ]
)


def test_history_hit_is_whole_blocks_of_the_previous_context_at_most_prompt_minus_one() -> None:
    # P1: previous context 103 -> 96 (6 blocks); Q1: previous context 22 -> 16
    assert history_hits(TURNS, 16).tolist() == [0, 96, 0, 16]
    # a turn that extends the whole previous context and adds nothing still computes its last token
    t = turns_frame(
        [
            {"program_id": "R", "turn_idx": 0, "input_tokens": 30, "output_tokens": 2},
            {"program_id": "R", "turn_idx": 1, "input_tokens": 32, "output_tokens": 1},
        ]
    )
    assert history_hits(t, 16).tolist() == [0, 16]  # min(32, 31) -> 31 -> one whole block
    assert history_hits(t, 16, reused_tokens=np.array([0, 10])).tolist() == [0, 0]


def test_uncontended_jct_by_hand() -> None:
    cfg = SimConfig()
    per_turn, prog = uncontended(TURNS, cfg, pricers=([StubPricer()], [64]))
    # P0: chunks 64 @0 and 36 @64 -> 0.074 + 0.0524; decode ctx 100, 101 -> 2 * 0.02 + 1e-5 * 201
    # P1: 54 new @96 -> 0.0736, no decode step
    assert per_turn["prefill_s"].tolist() == pytest.approx([0.1264, 0.0736, 0.030, 0.0356])
    assert per_turn["decode_s"].tolist() == pytest.approx([0.04201, 0.0, 0.0202, 0.0])
    got = prog.set_index("program_id")["uncontended_jct_s"]
    assert got["P"] == pytest.approx(0.1264 + 0.04201 + 0.0736 + 5.0)
    assert got["Q"] == pytest.approx(0.030 + 0.0202 + 0.0356 + 1.5)  # Q1's tool time is after the last turn


def test_instance_outside_the_config_is_an_error() -> None:
    bad = TURNS.assign(instance=[0, 3, 0, 0])
    with pytest.raises(ValueError, match="instance 3 outside the 1 instances"):
        uncontended(bad, SimConfig(), pricers=([StubPricer()], [64]))


def test_a_program_alone_on_the_cluster_runs_in_its_uncontended_jct() -> None:
    """One program, one instance, chunked prefill (9,000 new tokens > 8,192), the simulator's own pricer."""
    trace = make_trace([[(3000, 50, 2.0), (3500, 40, 1.0), (12500, 30, None)]])
    cfg = SimConfig().replace(workload={"concurrency": 1})
    res = simulate(trace, cfg)
    per_turn, prog = uncontended(res.turns, cfg)
    assert per_turn["history_hit_tokens"].tolist() == res.turns["cached_tokens"].tolist()
    assert prog["uncontended_jct_s"].iloc[0] == pytest.approx(res.programs["jct_s"].iloc[0], rel=1e-9)
    # and under load the same program is slower than that
    busy = simulate(
        make_trace([[(3000, 50, 2.0), (3500, 40, 1.0), (12500, 30, None)]] * 40),
        SimConfig().replace(workload={"concurrency": 40}, cache={"num_gpu_blocks": 2000}),
    )
    _, prog_busy = uncontended(busy.turns, busy.config)
    assert (busy.programs["jct_s"].to_numpy() > prog_busy["uncontended_jct_s"].to_numpy()).all()
