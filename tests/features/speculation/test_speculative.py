"""Speculative decoding (agentreplay.features.speculation, agentreplay.perf.speculative): hand-computed replays on a
linear pricer (tests/sim/fakes.py: a step costs 0.01 s + 0.001 s per token, no context term)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentreplay.features.speculation.config import SpeculativeConfig
from agentreplay.features.speculation.speculative import (
    draft_pricer,
    expected_tokens,
    step_workload,
    verification_steps,
)
from agentreplay.perf.model import PerfModel
from agentreplay.perf.speculative import DraftPasses, ScaledPricer, SpeculativePricer
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError, from_dict
from agentreplay.sim.workload import compile_trace
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf


def cfg(**spec: object) -> SimConfig:
    return SimConfig().replace(cache={"num_gpu_blocks": 1000}, workload={"concurrency": 1}, speculative=spec)


def test_expected_tokens_and_steps_by_hand() -> None:
    """E(a=0.5, k=3) = (1 - 0.5^4) / (1 - 0.5) = 0.9375 / 0.5 = 1.875 tokens per verification step. Ten decode
    tokens take ceil(10 / 1.875) = ceil(5.33) = 6 steps; nine take ceil(4.8) = 5. a = 0: 1 token per step;
    a = 1: k + 1 = 4; 15 tokens at E = 1.875 is exactly 8 steps (no float rounding up to 9)."""
    assert expected_tokens(0.5, 3) == pytest.approx(1.875)
    assert verification_steps(10, 0.5, 3) == 6
    assert verification_steps(9, 0.5, 3) == 5
    assert verification_steps(15, 0.5, 3) == 8
    assert expected_tokens(0.0, 3) == 1.0 and expected_tokens(1.0, 3) == 4.0
    assert verification_steps(0, 0.5, 3) == 0


def test_one_request_ngram_exact_times() -> None:
    """One turn: 100 prompt tokens, out = 10, k = 3, a = 0.5, n-gram drafter (no model cost).

    Prefill: 100 tokens, 0.01 + 0.1 = 0.11 s, emits token 1 (TTFT 0.11 s, as without speculation). The other 9
    tokens take ceil(9 / 1.875) = 5 verification steps; each forwards k + 1 = 4 tokens: 0.01 + 0.004 = 0.014 s.
    Finish 0.11 + 5 * 0.014 = 0.18 s (without speculation 0.11 + 9 * 0.011 = 0.209 s). TPOT from the 10 real
    tokens: 0.07 / 9; output tokens reported 10, not 6."""
    trace = make_trace([[(100, 10, None)]])
    res = simulate(trace, cfg(method="ngram", num_speculative_tokens=3, acceptance=0.5), perf=LinearPerf(0.01, 0.001))
    t = res.turns
    assert t["first_token_s"][0] == pytest.approx(0.11)
    assert t["finish_s"][0] == pytest.approx(0.18)
    assert t["output_tokens"][0] == 10
    assert t["tpot_s"][0] == pytest.approx(0.07 / 9)
    assert res.programs["jct_s"][0] == pytest.approx(0.18)
    s = res.summary["speculative"]
    assert s["verification_steps"] == 5 and s["decode_tokens"] == 9
    assert s["tokens_per_step"] == pytest.approx(9 / 5)
    base = simulate(trace, cfg(), perf=LinearPerf(0.01, 0.001))
    assert base.turns["finish_s"][0] == pytest.approx(0.209)
    assert "speculative" not in base.summary


def test_draft_model_as_a_fraction_adds_its_cost() -> None:
    """Same turn, draft model priced at half the target (draft_cost_fraction = 0.5).

    Prefill step: target 0.11 s + the drafter prefilling the prompt 0.5 * 0.11 = 0.055 s -> first token 0.165 s.
    Each verification step: target with 4 tokens 0.014 s + k = 3 draft passes of 0.5 * (0.01 + 0.001) = 0.0055 s
    = 0.0305 s; 5 steps = 0.1525 s; finish 0.3175 s (slower than no speculation at this tiny model cost ratio)."""
    trace = make_trace([[(100, 10, None)]])
    res = simulate(
        trace,
        cfg(method="draft_model", num_speculative_tokens=3, acceptance=0.5, draft_cost_fraction=0.5),
        perf=LinearPerf(0.01, 0.001),
    )
    assert res.turns["first_token_s"][0] == pytest.approx(0.165)
    assert res.turns["finish_s"][0] == pytest.approx(0.165 + 5 * 0.0305)


def test_pricer_adds_k_draft_passes_and_keeps_the_linear_form() -> None:
    """Target LinearPerf(0.01, 0.001), drafter LinearPerf(0.002, 0.0001), k = 3, n = 2 sequences:
    A = target A(2 * 4 = 8 tokens) + 3 * drafter A(2) = 0.018 + 3 * 0.0022 = 0.0246 s. A mixed step (one
    50-token chunk + the 2 decodes): target 0.01 + 0.001 * (50 + 8) = 0.068 s, drafter one pass with the chunk
    0.002 + 0.0001 * 52 = 0.0072 s and 2 more passes over the decodes 2 * 0.0022 = 0.0044 s: 0.0796 s."""
    p = SpeculativePricer(LinearPerf(0.01, 0.001), 3, LinearPerf(0.002, 0.0001))
    a, c = p.decode_coeffs(2)
    assert a == pytest.approx(0.0246) and c == 0.0
    assert p.iteration_time_s([], [500, 600]) == pytest.approx(a)  # decode-only: both forms agree
    assert p.iteration_time_s([(50, 0)], [500, 600]) == pytest.approx(0.0796)
    ngram = SpeculativePricer(LinearPerf(0.01, 0.001), 3)
    assert ngram.decode_coeffs(2)[0] == pytest.approx(0.018)
    assert ngram.iteration_time_s([(50, 0)], []) == pytest.approx(0.06)  # a prefill alone: as without speculation
    half = ScaledPricer(LinearPerf(0.01, 0.001), 0.5)
    assert half.decode_coeffs(2) == pytest.approx((0.006, 0.0))


def test_roofline_verification_reads_each_context_once() -> None:
    """On the roofline, a verification step of n sequences costs the target's constant at n (k + 1) tokens and
    the per-context-token slope of one query per sequence (KV read once for the k + 1 queries)."""
    target = PerfModel.from_names("h100-sxm", "llama-3.1-8b")
    p = SpeculativePricer(target, 3)
    a, c = p.decode_coeffs(4)
    assert a == target.decode_coeffs(16)[0] and c == target.decode_coeffs(4)[1]
    assert p.iteration_time_s([], [1000, 2000, 3000, 4000]) == pytest.approx(a + c * 10_000)


def test_per_tool_class_acceptance_picks_the_turns_class() -> None:
    """Turn 0 ends in an edit (a = 0.8): E = (1 - 0.8^4) / 0.2 = 2.952, 9 decode tokens -> ceil(3.05) = 4 steps,
    engine output 1 + 4 = 5. Turn 1 (submit, not listed) takes the default a = 0.5: 1 + 5 = 6."""
    w = compile_trace(make_trace([[(100, 10, 1.0), (130, 10, None)]], tool_class="edit"))
    sc = SpeculativeConfig(method="ngram", acceptance=0.5, acceptance_by_tool_class={"edit": 0.8})
    assert sc.rate("edit") == 0.8 and sc.rate("submit") == 0.5
    assert step_workload(w, sc).output_tokens.tolist() == [5, 6]
    assert math.isclose(expected_tokens(0.8, 3), 2.952)


def test_draft_model_from_the_catalogue_prices_the_drafter() -> None:
    """A catalogue drafter is the roofline of that model on the instance's GPUs and TP; its cost is added."""
    c = SimConfig().replace(speculative={"method": "draft_model", "draft_model": "llama-3.1-8b"})
    d = draft_pricer(c, ("h100-sxm", 1, "bf16"))
    assert isinstance(d, DraftPasses) and isinstance(d.pricer, PerfModel) and d.pricer.model.name == "llama-3.1-8b"
    # a draft pass is the draft model's step without the per-step host cost (framework_overhead), which the
    # target's engine step pays once
    fw = d.pricer.breakdown([], [100] * 4)["framework_overhead"]
    assert fw > 0 and d.decode_coeffs(4)[0] == pytest.approx(d.pricer.decode_coeffs(4)[0] - fw)
    assert d.iteration_time_s([(64, 0)], [100] * 4) == pytest.approx(
        d.pricer.iteration_time_s([(64, 0)], [100] * 4) - d.pricer.breakdown([(64, 0)], [100] * 4)["framework_overhead"]
    )
    target = PerfModel.from_names("h100-sxm", "llama-3.1-70b", tp=4)
    sd = SpeculativePricer(target, 3, draft_pricer(c, ("h100-sxm", 4, "bf16")))
    plain = SpeculativePricer(target, 3)
    assert sd.decode_coeffs(8)[0] > plain.decode_coeffs(8)[0]


def test_bad_values_name_section_field_and_value() -> None:
    with pytest.raises(ConfigError, match=r"\[speculative\] method = 'eagle'"):
        from_dict({"speculative": {"method": "eagle"}})
    with pytest.raises(ConfigError, match=r"\[speculative\] acceptance = 1.5"):
        from_dict({"speculative": {"method": "ngram", "acceptance": 1.5}})
    with pytest.raises(ConfigError, match=r"acceptance_by_tool_class = 'edits'"):
        from_dict({"speculative": {"method": "ngram", "acceptance_by_tool_class": {"edits": 0.8}}})
    with pytest.raises(ConfigError, match=r"num_speculative_tokens = 0"):
        from_dict({"speculative": {"method": "ngram", "num_speculative_tokens": 0}})
    with pytest.raises(ConfigError, match=r"draft_model = None.*exactly one"):
        from_dict({"speculative": {"method": "draft_model"}})
    with pytest.raises(ConfigError, match=r"draft_model = 'nope'"):
        from_dict({"speculative": {"method": "draft_model", "draft_model": "nope"}})
    with pytest.raises(ConfigError, match=r"draft_cost_fraction = 0.2 is invalid: only with method = 'draft_model'"):
        from_dict({"speculative": {"method": "ngram", "draft_cost_fraction": 0.2}})


def test_fast_decode_runs_stay_exact_under_speculation() -> None:
    """Four programs of two turns at 2 in flight, roofline target plus a draft model (a context-dependent step
    price): fast-forwarded verification runs give the same times as step by step."""
    trace = make_trace([[(300 + 50 * p, 40 + 7 * p, 0.05), (420 + 50 * p, 25 + 3 * p, None)] for p in range(4)])
    c = SimConfig().replace(
        cache={"num_gpu_blocks": 200},
        workload={"concurrency": 2},
        speculative={
            "method": "draft_model",
            "draft_model": "llama-3.1-8b",
            "acceptance": 0.6,
            "num_speculative_tokens": 4,
        },
    )
    fast = simulate(trace, c)
    slow = simulate(trace, c.replace(scheduler={"fast_decode": False}))
    assert fast.summary["engine"]["decode_runs"] > 0
    assert fast.turns["finish_s"].tolist() == slow.turns["finish_s"].tolist()
    assert fast.turns["first_token_s"].tolist() == slow.turns["first_token_s"].tolist()


class _Draws:
    """A generator whose geometric draws are fixed: 2, 1, 9, 1, ... (accepted drafts min(g - 1, k))."""

    def __init__(self, draws: list[int]) -> None:
        self.draws = draws

    def geometric(self, p: float, size: int) -> np.ndarray:
        out, self.draws = self.draws[:size], self.draws[size:]
        return np.array(out + [1] * (size - len(out)))


def test_sampled_steps_by_hand_and_seeded() -> None:
    """k = 3, geometric draws 2, 1, 9, 1 -> accepted 1, 0, 3 (capped), 0 -> emitted 2, 1, 4, 1: seven tokens take
    three steps (2 + 1 + 4 = 7). a = 1: ceil(n / (k + 1)); a = 0: one token per step. Seeded draws repeat, and the
    mean over 2,000 turns of 100 tokens at a = 0.5 is near 100 / 1.875 = 53.3 (plus under a step of overshoot)."""
    from agentreplay.features.speculation.speculative import sampled_steps

    got = sampled_steps(np.array([7]), np.array([0.5]), 3, _Draws([2, 1, 9, 1]))  # type: ignore[arg-type]
    assert got.tolist() == [3]
    edge = sampled_steps(np.array([9, 9, 0]), np.array([1.0, 0.0, 0.5]), 3, np.random.default_rng(0))
    assert edge.tolist() == [3, 9, 0]
    n, a = np.full(2000, 100), np.full(2000, 0.5)
    s1 = sampled_steps(n, a, 3, np.random.default_rng(7))
    assert s1.tolist() == sampled_steps(n, a, 3, np.random.default_rng(7)).tolist()
    assert 53.3 <= s1.mean() <= 54.5 and s1.std() > 1.0


def test_sampled_model_in_a_run_is_seeded() -> None:
    trace = make_trace([[(100, 60, 0.5), (180, 40, None)], [(120, 50, None)]])
    c = cfg(method="ngram", acceptance=0.6, acceptance_model="sampled")
    one, two = simulate(trace, c, perf=LinearPerf()), simulate(trace, c, perf=LinearPerf())
    assert one.turns["finish_s"].tolist() == two.turns["finish_s"].tolist()
    assert one.summary["speculative"]["acceptance_model"] == "sampled"
    other = simulate(trace, c.replace(seed=5), perf=LinearPerf())
    assert other.summary["speculative"]["verification_steps"] != one.summary["speculative"]["verification_steps"]
    with pytest.raises(ConfigError, match=r"acceptance_model = 'random'"):
        from_dict({"speculative": {"method": "ngram", "acceptance_model": "random"}})
