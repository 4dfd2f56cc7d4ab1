"""Thinking budget (agentreplay.features.thinking): the cap arithmetic by hand, the context rule, and a replay."""

from __future__ import annotations

import numpy as np
import pytest

from agentreplay.features.thinking.budget import apply, cut_tokens
from agentreplay.features.thinking.config import ThinkingConfig
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError, from_dict
from agentreplay.sim.workload import compile_trace
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf


def _trace(reasoning: list[float | None]):
    """Program 0: turns of (1000, 300), (1400, 50), (1500, 80); program 1: (800, 100), (950, 40)."""
    trace = make_trace([[(1000, 300, 1.0), (1400, 50, 1.0), (1500, 80, None)], [(800, 100, 1.0), (950, 40, None)]])
    trace.turns["reasoning_tokens"] = reasoning
    return trace


def test_cap_arithmetic_by_hand() -> None:
    """cut = max(0, min(r, out) - B), leaving at least one token. B = 64: r = 200 of 300 -> cut 136 (164 left);
    r = 150 > out = 100 counts as 100 -> cut 36; r = 50 = out, B = 0 -> cut 49 (one token left); NaN -> 0."""
    out = np.array([300, 100, 50, 80])
    assert cut_tokens(out, np.array([200.0, 150.0, np.nan, 10.0]), 64).tolist() == [136, 36, 0, 0]
    assert cut_tokens(np.array([50]), np.array([50.0]), 0).tolist() == [49]


def test_apply_counts_and_keeps_later_inputs_by_default() -> None:
    """reasoning [200, None, 0, 90, 0], budget 64: turn 0 loses 136 tokens, program 1's turn 0 loses 26; the
    unrecorded turn is left alone and counted; later inputs are as recorded (thinking not kept in context)."""
    w = compile_trace(_trace([200, None, 0, 90, 0]))
    got, st = apply(w, ThinkingConfig(budget_tokens=64))
    assert got.output_tokens.tolist() == [164, 50, 80, 74, 40]
    assert got.input_tokens.tolist() == w.input_tokens.tolist()
    assert (st.turns_with_reasoning, st.turns_unrecorded, st.turns_capped) == (2, 1, 2)
    assert (st.reasoning_tokens, st.cut_tokens, st.input_tokens_removed) == (290, 162, 0)


def test_reasoning_in_context_shrinks_the_programs_later_prompts() -> None:
    """With the thinking kept in context, program 0's turns 1 and 2 lose turn 0's 136-token cut from input and
    reuse (1400 -> 1264, 1500 -> 1364); program 1's turn 1 loses its turn 0's 26 (950 -> 924)."""
    w = compile_trace(_trace([200, None, 0, 90, 0]))
    got, st = apply(w, ThinkingConfig(budget_tokens=64, reasoning_in_context=True))
    assert got.input_tokens.tolist() == [1000, 1264, 1364, 800, 924]
    assert got.reused_tokens.tolist() == [0, 1300 - 136, 1450 - 136, 0, 900 - 26]
    assert st.input_tokens_removed == 136 * 2 + 26


def test_off_is_the_same_workload_and_a_run_shortens_decode() -> None:
    """One turn, 100 prompt tokens, 10 output of which 8 reasoning, budget 2: 6 tokens cut, 4 left; finish
    0.11 (prefill) + 3 decode steps * 0.011 = 0.143 s (0.209 s uncapped)."""
    trace = make_trace([[(100, 10, None)]])
    trace.turns["reasoning_tokens"] = [8]
    w = compile_trace(trace)
    assert apply(w, ThinkingConfig())[0] is w
    base = SimConfig().replace(cache={"num_gpu_blocks": 1000}, workload={"concurrency": 1})
    res = simulate(trace, base.replace(thinking={"budget_tokens": 2}), perf=LinearPerf(0.01, 0.001))
    assert res.turns["finish_s"][0] == pytest.approx(0.143)
    assert res.turns["output_tokens"][0] == 4
    assert res.summary["thinking"]["cut_tokens"] == 6
    assert "thinking" not in simulate(trace, base, perf=LinearPerf(0.01, 0.001)).summary


def test_bad_values_name_section_field_and_value() -> None:
    with pytest.raises(ConfigError, match=r"\[thinking\] budget_tokens = -1"):
        from_dict({"thinking": {"budget_tokens": -1}})
    with pytest.raises(ConfigError, match=r"\[thinking\] reasoning_in_context = 'yes'"):
        from_dict({"thinking": {"budget_tokens": 1, "reasoning_in_context": "yes"}})
