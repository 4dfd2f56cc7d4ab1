"""DecodeCohort against a brute-force model that advances every member one step at a time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.request import Request
from agentreplay.scheduler.cohort import DecodeCohort

BS = 16


def decoding(i: int, prompt: int, generated: int, target: int) -> Request:
    pool = SegmentPool(8, BS)
    r = Request(
        turn=i,
        program=i,
        turn_idx=0,
        prompt=prompt,
        target_out=target,
        reuse=0,
        pfx=None,
        prog=pool.segment(("p", i), 0),
        base=0,
        release_s=0.0,
    )
    r.generated, r.computed, r.run_seq = generated, prompt + generated - 1, i
    return r


members_st = st.lists(st.tuples(st.integers(1, 200), st.integers(1, 5), st.integers(1, 60)), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(members=members_st, pre=st.integers(0, 40), steps=st.lists(st.integers(1, 30), min_size=1, max_size=8))
def test_cohort_matches_step_by_step(members, pre, steps) -> None:
    co = DecodeCohort(BS)
    co.advance(pre)  # joins happen at an arbitrary tick
    reqs = [decoding(i, p, g, g + extra) for i, (p, g, extra) in enumerate(members)]
    for r in reqs:
        co.join(r)
    model = {r.run_seq: [r.computed, r.generated, r.target_out] for r in reqs}
    for k in steps:
        if not co.n:
            break
        k = min(k, co.steps_to_finish())
        # blocks: step j allocates one block per member whose computed fills its last block
        want_need = sum(1 for c, _, _ in model.values() if c % BS == 0)
        want_later = sum(1 for j in range(1, k) for c, _, _ in model.values() if (c + j) % BS == 0)
        assert co.need() == want_need
        assert co.crossings(1, k - 1) == want_later
        assert co.sum_ctx == sum(c for c, _, _ in model.values())
        done = co.advance(k)
        for m in model.values():
            m[0] += k
            m[1] += k
        want_done = sorted(s for s, (_, g, t) in model.items() if g == t)
        assert [r.run_seq for r in done] == want_done  # admission order
        for r in done:
            assert (r.computed, r.generated) == tuple(model.pop(r.run_seq)[:2]) and not r.lazy
        assert all(g < t for _, g, t in model.values())
    co.sync(reqs)
    for r in reqs:
        if r.run_seq in model:
            assert [r.computed, r.generated] == model[r.run_seq][:2] and r.lazy
    co.dissolve(reqs)
    assert co.n == 0 and co.sum_ctx == 0 and not any(r.lazy for r in reqs)
    for r in reqs:
        if r.run_seq in model:
            assert [r.computed, r.generated] == model[r.run_seq][:2]


def test_join_rejects_a_request_that_is_not_decoding() -> None:
    co = DecodeCohort(BS)
    r = decoding(0, 50, 1, 4)
    r.computed -= 3  # still prefilling
    with pytest.raises(AssertionError, match="decoding"):
        co.join(r)
    done = decoding(1, 50, 4, 4)  # already emitted its last token
    with pytest.raises(AssertionError, match="decoding"):
        co.join(done)


def test_stepping_past_a_finish_is_an_error() -> None:
    co = DecodeCohort(BS)
    co.join(decoding(0, 10, 1, 3))
    assert co.steps_to_finish() == 2
    with pytest.raises(AssertionError, match="past its last token"):
        co.advance(3)


@settings(max_examples=200, deadline=None)
@given(
    members=members_st,
    pre=st.integers(0, 40),
    first=st.integers(0, 3),
    free=st.integers(0, 400),
    limit=st.integers(0, 300),
)
def test_steps_within_is_the_most_steps_whose_blocks_fit(members, pre, first, free, limit) -> None:
    """``steps_within(first, free, limit)`` = the largest s <= limit with crossings(first, s) <= free (the
    binary search it replaced, by brute force)."""
    co = DecodeCohort(BS)
    co.advance(pre)
    for i, (p, g, extra) in enumerate(members):
        co.join(decoding(i, p, g, g + extra))
    want = max(s for s in range(limit + 1) if co.crossings(first, s) <= free)
    assert co.steps_within(first, free, limit) == want
