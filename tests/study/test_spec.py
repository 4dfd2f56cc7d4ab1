"""The study's knobs: the eta transform on the real trace, the policy table, the bimodal tool model."""

from __future__ import annotations

import numpy as np
import pytest

from agentreplay.sim.tools_generative import load_tool_model
from agentreplay.sim.workload import Workload
from agentreplay.study.spec import (
    MEASURED_TOOLS,
    POLICIES,
    POLICY_KEYS,
    bimodal_tool_model,
    eta_of,
    policy_name,
    policy_zip,
    reuse_scale_for,
    tool_s_per_program,
)


@pytest.mark.parametrize("eta", [0.0, 0.1, 0.3, 0.5, 0.7, 0.9])
@pytest.mark.parametrize("programs", [40, 500])
def test_eta_transform_hits_the_requested_ratio_on_the_real_trace(
    workload: Workload, eta: float, programs: int
) -> None:
    w = workload.head(programs)
    assert eta_of(w) > 0.95  # the bundled trace reuses almost its whole history
    got = eta_of(w, reuse_scale_for(w, eta))
    assert got == pytest.approx(eta, abs=0.002)  # rounding each turn's reuse down costs < 1 token per turn


def test_eta_transform_keeps_prompts_and_only_lowers_reuse(workload: Workload) -> None:
    w = workload.head(40)
    t = w.with_reuse_scale(reuse_scale_for(w, 0.3))
    assert np.array_equal(t.input_tokens, w.input_tokens)
    assert np.array_equal(t.output_tokens, w.output_tokens)
    assert (t.reused_tokens <= w.reused_tokens).all() and t.reused_tokens.sum() < w.reused_tokens.sum()


def test_eta_above_the_traces_own_is_refused(workload: Workload) -> None:
    with pytest.raises(ValueError, match="the trace's own reuse ratio"):
        reuse_scale_for(workload.head(40), 0.999)


def test_every_policy_sets_every_key_and_is_recognised() -> None:
    z = policy_zip(list(POLICIES))
    assert set(z) == set(POLICY_KEYS) and all(len(v) == len(POLICIES) for v in z.values())
    for name, values in POLICIES.items():
        config: dict = {}
        for path, v in values.items():
            s, f = path.split(".")
            config.setdefault(s, {})[f] = v
        assert policy_name(config) == name
    with pytest.raises(ValueError, match="unknown study policy"):
        policy_zip(["vllm", "nope"])


def test_presets_differ_from_vllm_where_published() -> None:
    assert POLICIES["continuum"]["policy.retention"] == "continuum"
    assert POLICIES["continuum-nocap"]["policy.continuum_max_ttl_s"] > 1e5
    assert POLICIES["continuum-code"]["policy.continuum_variant"] == "code"
    assert POLICIES["infercept"]["tiers.dram_gib"] > 0  # the preset brings its host tier


def test_bimodal_model_has_a_fast_and_a_slow_mode_from_the_measured_classes() -> None:
    data = bimodal_tool_model(draws=20_000)
    spec = load_tool_model(data)  # a valid tool-model file
    measured = load_tool_model(MEASURED_TOOLS)
    fast, slow = spec.dist("read"), spec.dist("test")
    assert float(fast.ppf(0.5)) < 1.0 < float(slow.ppf(0.5))
    assert set(spec.classes) == set(measured.classes)
    modes = data["provenance"]["modes"]
    assert "test" in modes["slow"] and "build" in modes["slow"] and "read" in modes["fast"]
    # two modes two orders of magnitude apart (measured: tens of ms vs seconds)
    assert float(fast.ppf(0.5)) < 0.1 and float(slow.ppf(0.5)) > 1.0


def test_tool_time_per_program_scales_with_the_tool_scale(workload: Workload) -> None:
    base = {"workload": {"max_programs": 10}, "tools": {"mode": "replay"}}
    t1 = tool_s_per_program(workload, base)
    assert t1 > 0
    t4 = tool_s_per_program(workload, {**base, "tools": {"mode": "scale", "scale": 4.0}})
    assert t4 == pytest.approx(4 * t1)
