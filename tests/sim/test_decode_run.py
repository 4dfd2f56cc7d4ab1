"""A fast-forwarded decode run's step end times (agentreplay.sim.instance._Run): summed one step at a time from
the run's start, as single decode steps priced ``a + c * sum_ctx`` would be, and never stored."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.sim.instance import _Run


def _reference_ends(t0: float, n: int, sum_ctx: int, steps: int, a: float, c: float) -> list[float]:
    """Step by step: each step priced from its own context sum, added to the clock in order."""
    ends, t = [], t0
    for i in range(steps):
        t = t + (a + c * (sum_ctx + i * n))
        ends.append(t)
    return ends


runs = st.tuples(
    st.floats(0.0, 1e5, allow_nan=False),  # t0
    st.integers(1, 256),  # n
    st.integers(0, 10**9),  # sum_ctx
    st.integers(1, 300),  # steps
    st.floats(1e-4, 0.1),  # a
    st.floats(0.0, 1e-7),  # c
)


@settings(max_examples=200, deadline=None)
@given(runs, st.data())
def test_step_ends_are_bit_identical_to_summing_single_steps(spec, data) -> None:
    t0, n, sum_ctx, steps, a, c = spec
    run = _Run(t0, n, sum_ctx, steps, a, c)
    ends = _reference_ends(*spec)
    j = data.draw(st.integers(1, steps))
    assert run.end_of_step(j) == ends[j - 1]  # exact, not approximate


@settings(max_examples=200, deadline=None)
@given(runs, st.data())
def test_progress_is_the_step_in_progress_and_its_end(spec, data) -> None:
    """``progress(now)`` = (first step whose end is at or after ``now``, capped at the last; its end), the
    ``bisect_left`` over all step ends that the engine used to store; exact hits and times past the run too."""
    t0, n, sum_ctx, steps, a, c = spec
    run = _Run(t0, n, sum_ctx, steps, a, c)
    ends = _reference_ends(*spec)
    k = data.draw(st.integers(0, steps - 1))
    now = data.draw(st.sampled_from([t0, ends[k], (ends[k] + (ends[k - 1] if k else t0)) / 2, ends[-1] + 1.0]))
    j = min(steps, bisect_left(ends, now) + 1)
    assert run.progress(now) == (j, ends[j - 1])
    assert run.steps_done_by(now) == j
