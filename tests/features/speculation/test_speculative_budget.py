"""Speculative decoding's share of the token budget (vLLM v1 ``Scheduler.schedule``: a decoding request with ``k``
drafts is scheduled ``1 + k`` tokens, capped by the budget left; the scheduler's ``decode_tokens``)."""

from __future__ import annotations

from typing import Any

import pytest

from agentreplay.kv.manager import KVManager
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.request import Request
from agentreplay.scheduler.scheduler import Scheduler
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim import build as build_module
from tests.factories import make_request, make_trace
from tests.sim.test_properties import assert_paths_agree, three_paths

BS = 16


def request(program: int, prompt: int, out: int = 10) -> Request:
    return make_request(program, prompt, target_out=out)


def decoding(budget: int, decode_tokens: int, n: int) -> Scheduler:
    """A scheduler with ``n`` requests of 8-token prompts, prefilled (one token emitted each): all decoding."""
    sched = Scheduler(
        KVManager(SegmentPool(200, BS), enable_prefix_caching=False),
        max_num_seqs=16,
        max_num_batched_tokens=max(budget, 8 * n),
        decode_tokens=decode_tokens,
    )
    sched.waiting.extend(request(p, 8) for p in range(n))
    plan = sched.schedule(0.0)
    assert len(plan.admitted) == n
    sched.update_from_output(plan, 1.0)
    sched.recycle(plan)
    sched.max_num_batched_tokens = budget
    return sched


@pytest.mark.parametrize(("decode_tokens", "chunk"), [(1, 18), (4, 12)])
def test_drafts_take_their_share_of_the_budget_beside_a_prefill(decode_tokens: int, chunk: int) -> None:
    # budget 20, two decodes: 2 x 1 leave 18 prompt tokens; 2 x (1 + 3 drafts) leave 12 (the cohort's fast path)
    sched = decoding(20, decode_tokens, 2)
    sched.waiting.append(request(9, 40))
    plan = sched.schedule(1.0)
    assert plan.cohort == 2 and not plan.decode
    assert [(r.program, n) for r, n, _ in plan.prefill] == [(9, chunk)]


def test_the_last_decode_gets_fewer_drafts_and_the_budget_ends_the_step() -> None:
    # budget 10, four decodes of 1 + 3: vLLM's loop schedules 4, 4, then 2 (one draft), and the fourth request
    # and the waiting prompt not at all (token_budget is 0)
    sched = decoding(10, 4, 4)
    sched.waiting.append(request(9, 40))
    plan = sched.schedule(1.0)
    assert plan.cohort == 0 and [r.program for r in plan.decode] == [0, 1, 2]
    assert not plan.prefill and not plan.admitted and plan.stop == "no_budget"


def test_decode_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="decode_tokens=0 must be >= 1"):
        Scheduler(KVManager(SegmentPool(10, BS)), 4, 64, decode_tokens=0)


def test_speculation_sets_the_budget_share_and_the_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with k = 3 drafts and a budget the drafts bind: the fast (cohort, decode runs), step-by-step and eager
    paths give the same replay; the same run with the drafts taking no budget (the scheduler forced to 1) takes
    fewer engine steps, so ``simulate`` did hand the scheduler 1 + k."""
    trace = make_trace([[(200 + 90 * p, 30 + 5 * p, 0.05), (420 + 60 * p, 20 + 3 * p, None)] for p in range(6)])
    cfg = SimConfig().replace(
        workload={"concurrency": 6},
        scheduler={"max_num_batched_tokens": 64},
        speculative={"method": "ngram", "num_speculative_tokens": 3, "acceptance": 0.6},
    )
    runs = three_paths(trace, cfg)
    assert_paths_agree(runs)
    with_share = runs[0].summary["engine"]["iterations"]

    def no_share(*args: Any, **kw: Any) -> Scheduler:
        kw["decode_tokens"] = 1
        return Scheduler(*args, **kw)

    monkeypatch.setattr(build_module, "Scheduler", no_share)  # (sim/build.py builds the instances' schedulers)
    without = simulate(trace, cfg).summary["engine"]["iterations"]
    assert with_share > without
