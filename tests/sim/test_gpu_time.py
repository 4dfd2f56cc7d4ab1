"""GPU-seconds per turn and program (agentreplay.sim.gpu_time): hand-computed shares and the conservation law."""

from __future__ import annotations

import numpy as np
import pytest

from agentreplay.sim import SimConfig, simulate
from tests.factories import make_trace
from tests.features.dp.test_dp import _cfg as dp_cfg
from tests.features.dp.test_dp import _trace as dp_trace
from tests.sim.fakes import LinearPerf


def _two_programs():
    """A: 20-token prompt, 3 output tokens, at t = 0; B: 100-token prompt, 1 output token, at t = 0.5."""
    trace = make_trace([[(20, 3, None)], [(100, 1, None)]])
    trace.programs["arrival_s"] = [0.0, 0.5]
    return trace


@pytest.mark.parametrize("tp", [1, 2])
def test_prefill_and_decode_in_one_step_share_it_by_tokens(tp: int) -> None:
    """Constant pricer: every step lasts 1 s (LinearPerf a=1, b=0), on ``tp`` GPUs.

    step 1 [0, 1]: A's 20-token prefill alone -> A 1 x tp; A emits token 1 and joins the decode cohort.
    step 2 [1, 2]: A's decode (1 token) + B's 100-token prefill (B arrived at 0.5): T = 101 tokens, so
    A gets tp / 101 and B 100 tp / 101; B emits its only token and finishes; A emits token 2.
    step 3 [2, 3]: A decodes alone (a one-step decode run) -> A 1 x tp; A emits token 3 and finishes.
    A = tp (2 + 1/101), B = tp 100/101; sum 3 tp = busy 3 s x tp GPUs."""
    config = SimConfig().replace(cache={"num_gpu_blocks": 100}, workload={"arrival": "trace"}, hardware={"tp": tp})
    res = simulate(_two_programs(), config, perf=LinearPerf(a=1.0, b=0.0))
    t = res.turns
    assert t["finish_s"].tolist() == [3.0, 2.0]
    assert t["gpu_s"].to_numpy() == pytest.approx([tp * (2 + 1 / 101), tp * 100 / 101], rel=1e-12)
    assert res.programs["gpu_s"].to_numpy() == pytest.approx(t["gpu_s"].to_numpy(), rel=1e-12)
    assert res.summary["gpu_s_attributed"] == pytest.approx(3.0 * tp, rel=1e-12)
    assert res.summary["gpu_hours_per_1000_tasks_attributed"] == pytest.approx(3.0 * tp / 3600 * 1000 / 2)


def test_a_decode_run_is_charged_per_member() -> None:
    """Two 16-token prompts, 11 output tokens each, both at t = 0 (closed loop, concurrency 2); step time
    a + b * tokens with a = 0.01, b = 0.001. Prefill: 32 tokens, 0.042 s, split 16/32 each. Then 10 decode
    steps of both (a run, step 0.012 s) split 1/2 each: each program 0.021 + 0.06 = 0.081 GPU-s."""
    trace = make_trace([[(16, 11, None)], [(16, 11, None)]])
    config = SimConfig().replace(cache={"num_gpu_blocks": 100}, workload={"concurrency": 2})
    res = simulate(trace, config, perf=LinearPerf(a=0.01, b=0.001))
    assert res.summary["engine"]["decode_runs"] >= 1
    assert res.turns["gpu_s"].to_numpy() == pytest.approx([0.081, 0.081], rel=1e-9)


def _conserved(res) -> None:  # type: ignore[no-untyped-def]
    busy = res.summary["engine"]["busy_s_per_instance"]
    tps = [p["tp"] for p in res.summary["cluster"]["per_instance"]]
    want = sum(b * tp for b, tp in zip(busy, tps, strict=True))
    got = float(res.turns["gpu_s"].sum())
    assert got == pytest.approx(want, rel=1e-9)
    assert float(res.programs["gpu_s"].sum()) == pytest.approx(want, rel=1e-9)
    assert (res.turns["gpu_s"] > 0).all()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gpu_seconds_are_conserved_with_preemption_and_truncated_runs(seed: int) -> None:
    """Random multi-turn programs, Poisson arrivals (they truncate decode runs), few KV blocks (preemption),
    two instances of TP 2, a chunked-prefill budget and the catalog's roofline pricer (decode steps grow with
    context): the turns' GPU-seconds sum to the instances' busy seconds x GPUs."""
    rng = np.random.default_rng(seed)
    progs = [
        [(int(rng.integers(30, 200)), int(rng.integers(20, 200)), float(rng.uniform(0, 0.05))) for _ in range(3)]
        for _ in range(8)
    ]
    config = SimConfig().replace(
        cache={"num_gpu_blocks": 40},
        hardware={"tp": 2, "instances": 2},
        scheduler={"max_num_batched_tokens": 256},
        workload={"arrival": "poisson", "rate_per_s": 200.0},
        seed=seed,
    )
    res = simulate(make_trace(progs), config)
    assert res.summary["preemptions"] > 0 and res.summary["engine"]["decode_runs"] > 0
    _conserved(res)


def test_gpu_seconds_are_conserved_in_a_lockstep_dp_group() -> None:
    """Lockstep MoE DP: each rank's tokens of the group step are charged the group step's duration on the
    rank's GPUs; dummy-batch ranks are charged nothing and count no busy time."""
    res = simulate(dp_trace([100, 100, 300], [2, 40, 9]), dp_cfg(dp=2, ep=True))
    assert res.summary["dp_group"]["dummy_rank_steps"] > 0
    _conserved(res)
