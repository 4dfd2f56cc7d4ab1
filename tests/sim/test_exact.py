"""Hand-computed replays on tiny traces with a linear performance model (see tests/sim/fakes.py)."""

from __future__ import annotations

import pytest

from agentreplay.sim import SimConfig, simulate
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf


def cfg(**sections) -> SimConfig:
    base = SimConfig().replace(cache={"num_gpu_blocks": 1000}, workload={"concurrency": 1})
    return base.replace(**sections) if sections else base


def test_one_program_two_turns_exact_times_and_hits() -> None:
    # turn 0: 100 prompt tokens, 10 output; tool 2 s; turn 1: 130 prompt tokens (reuses 110), 5 output.
    trace = make_trace([[(100, 10, 2.0), (130, 5, None)]])
    res = simulate(trace, cfg(), perf=LinearPerf(a=0.01, b=0.001))
    t = res.turns
    # turn 0: prefill 100 tokens (0.11 s) emits token 1, then 9 decode steps of 0.011 s.
    assert t["first_token_s"][0] == pytest.approx(0.11)
    assert t["finish_s"][0] == pytest.approx(0.11 + 9 * 0.011)
    # turn 1 released after the 2 s tool; 109 tokens have KV (the last output token never does):
    # 6 full blocks = 96 tokens hit (reuse bound 110 // 16 = 6 blocks), 34 computed.
    release1 = 0.209 + 2.0
    assert t["release_s"][1] == pytest.approx(release1)
    assert t["cached_tokens"].tolist() == [0, 96]
    assert t["first_token_s"][1] == pytest.approx(release1 + 0.01 + 0.034)
    assert t["finish_s"][1] == pytest.approx(release1 + 0.044 + 4 * 0.011)
    assert res.programs["jct_s"][0] == pytest.approx(release1 + 0.044 + 0.044)
    assert t["ttft_s"][1] == pytest.approx(0.044)
    assert t["tpot_s"][0] == pytest.approx(0.011)
    assert res.summary["prefix_hit_rate"] == pytest.approx(96 / 230)


def test_shared_prefix_is_hit_by_the_second_program() -> None:
    # 40-token shared prefix = 2 full blocks; both programs have one turn of 100 tokens.
    trace = make_trace([[(100, 1, None)], [(100, 1, None)]], shared_prefix_tokens=40)
    res = simulate(trace, cfg(), perf=LinearPerf())
    assert res.turns["cached_tokens"].tolist() == [0, 32]
    assert res.turns["cached_prefix_tokens"].tolist() == [0, 32]
    assert res.summary["prefix_hit_rate_shared_prefix"] == pytest.approx(32 / 200)


def test_chunked_prefill_respects_the_token_budget() -> None:
    trace = make_trace([[(250, 1, None)]])
    res = simulate(trace, cfg(scheduler={"max_num_batched_tokens": 100}), perf=LinearPerf(a=0.01, b=0.001))
    # chunks of 100, 100, 50: the last emits the only token.
    assert res.turns["finish_s"][0] == pytest.approx(0.11 + 0.11 + 0.06)


def test_closed_loop_starts_the_next_program_when_one_finishes() -> None:
    trace = make_trace([[(50, 1, None)], [(50, 1, None)], [(50, 1, None)]])
    res = simulate(trace, cfg(workload={"concurrency": 2}), perf=LinearPerf(a=0.01, b=0.001))
    arrivals = res.programs["arrival_s"].tolist()
    assert arrivals[:2] == [0.0, 0.0]
    # both prefill together in one 100-token iteration (0.11 s); the third arrives when they finish.
    assert arrivals[2] == pytest.approx(0.11)


def test_preemption_by_recompute_when_blocks_run_out() -> None:
    # 8 blocks of 16 tokens = 128 tokens. Two programs of 60-token prompts decoding 40 tokens each need
    # 100 tokens each: the most recently admitted one is preempted, recomputed later, and both finish.
    trace = make_trace([[(60, 40, None)], [(60, 40, None)]])
    res = simulate(trace, cfg(cache={"num_gpu_blocks": 8}, workload={"concurrency": 2}), perf=LinearPerf())
    t = res.turns
    assert t["preemptions"].tolist() == [0, 1]
    assert t["recomputed_tokens"][1] > 0
    assert res.summary["output_tokens"] == 80
    assert t["finish_s"][1] > t["finish_s"][0]


def test_poisson_arrivals_are_seeded() -> None:
    trace = make_trace([[(50, 2, None)]] * 5)
    a = simulate(trace, cfg(workload={"arrival": "poisson", "rate_per_s": 2.0}, seed=7), perf=LinearPerf())
    b = simulate(trace, cfg(workload={"arrival": "poisson", "rate_per_s": 2.0}, seed=7), perf=LinearPerf())
    c = simulate(trace, cfg(workload={"arrival": "poisson", "rate_per_s": 2.0}, seed=8), perf=LinearPerf())
    assert a.programs["arrival_s"].tolist() == b.programs["arrival_s"].tolist()
    assert a.programs["arrival_s"].tolist() != c.programs["arrival_s"].tolist()


def test_tool_modes() -> None:
    trace = make_trace([[(50, 1, 3.0), (60, 1, None)]])
    fixed = simulate(trace, cfg(tools={"mode": "fixed", "fixed_s": 0.5}), perf=LinearPerf())
    scaled = simulate(trace, cfg(tools={"mode": "scale", "scale": 2.0}), perf=LinearPerf())
    assert fixed.turns["tool_s"][0] == 0.5
    assert scaled.turns["tool_s"][0] == 6.0
    assert scaled.turns["release_s"][1] - scaled.turns["finish_s"][0] == pytest.approx(6.0)


def test_reserve_full_isl_admits_only_when_the_whole_prompt_fits() -> None:
    # 12 blocks of 16 tokens; two 100-token prompts (7 blocks each) decoding 30 tokens, chunks of 32 tokens.
    trace = make_trace([[(100, 30, None)], [(100, 30, None)]])
    base = cfg(cache={"num_gpu_blocks": 12}, workload={"concurrency": 2}, scheduler={"max_num_batched_tokens": 32})
    full = simulate(trace, base, perf=LinearPerf())  # default: vLLM --scheduler-reserve-full-isl
    chunk = simulate(trace, base.replace(scheduler={"reserve_full_isl": False}), perf=LinearPerf())
    # whole-prompt rule: p1 waits until p0 is done, nobody is preempted
    assert full.turns["preemptions"].sum() == 0
    assert full.turns["first_scheduled_s"][1] == pytest.approx(full.turns["finish_s"][0])
    # first-chunk rule: p1 starts while p0 still runs, the pool runs out, and the most recent admission is preempted
    assert chunk.turns["first_scheduled_s"][1] < chunk.turns["finish_s"][0]
    assert chunk.turns["preemptions"].sum() >= 1


class ContextRecorder(LinearPerf):
    """LinearPerf that records the decode contexts of every mixed iteration it prices."""

    def __init__(self, needs: bool) -> None:
        super().__init__()
        self.needs_decode_contexts = needs
        self.mixed: list[list[int]] = []

    def iteration_time_s(self, prefill, decode_ctx) -> float:  # type: ignore[no-untyped-def]
        if prefill and decode_ctx:
            self.mixed.append(list(decode_ctx))
        return super().iteration_time_s(prefill, decode_ctx)


@pytest.mark.parametrize("lazy", [True, False])
def test_a_pricer_that_needs_decode_contexts_gets_each_one(lazy: bool) -> None:
    # p0 and p2 decode for a long time, started together (prompts 100 and 300); p1's second call arrives after a
    # 0.5 s tool and is prefilled beside them: a mixed iteration with two decodes whose contexts differ by 200.
    trace = make_trace([[(100, 200, None)], [(50, 1, 0.5), (80, 3, None)], [(300, 200, None)]])
    config = cfg(workload={"concurrency": 3}, scheduler={"lazy_decode": lazy})
    runs = {}
    for needs in (True, False):
        rec = ContextRecorder(needs)
        runs[needs] = (simulate(trace, config, perf=rec), rec.mixed)
    (res_t, got), (res_f, summed) = runs[True], runs[False]
    assert got and len(got) == len(summed)
    for real, agg in zip(got, summed, strict=True):
        assert len(real) == len(agg) == 2
        assert sorted(real)[1] - sorted(real)[0] == 200  # each decode's own context
        assert agg[1] == 0 and agg[0] == sum(real)  # count and sum only
    assert res_t.turns["finish_s"].tolist() == res_f.turns["finish_s"].tolist()
