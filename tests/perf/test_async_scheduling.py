"""vLLM's async scheduling hides the host step cost: every pricer drops exactly that term, nothing else."""

from __future__ import annotations

import pytest

from agentreplay.perf import load_gpu
from agentreplay.perf.registry import pricer_from_names
from agentreplay.perf.stepcost import StepCost, overlapped
from validation.e2e.deployment import from_config


def test_overlapped_zeroes_only_the_step_cost() -> None:
    eff = load_gpu("rtx4090").efficiency
    out = overlapped(eff)
    assert StepCost.of(out) == StepCost(0.0, 0.0)
    assert out.compute_efficiency == eff.compute_efficiency and out.kernel_overhead_us == eff.kernel_overhead_us


@pytest.mark.parametrize("kind", ["roofline", "refined", "table"])
def test_each_pricer_saves_exactly_the_host_step(kind: str) -> None:
    gpu, model = "rtx4090", "llama-3.1-8b"
    eff = load_gpu(gpu).efficiency
    whole = pricer_from_names(kind, gpu, model)
    hidden = pricer_from_names(kind, gpu, model, async_scheduling=True)
    decode = [1000] * 8
    saved = whole.iteration_time_s([], decode) - hidden.iteration_time_s([], decode)
    assert saved == pytest.approx(StepCost.of(eff).time_s(8), rel=1e-6)
    assert saved > 0


def test_the_recorded_flag_is_read_and_defaults_to_off() -> None:
    on = from_config({"resolved_config": {"scheduler_config": {"async_scheduling": True}}}, "meta.json", "0.19.0")
    assert on.async_scheduling and on.paths["async_scheduling"] == "resolved_config.scheduler_config.async_scheduling"
    assert from_config({}, "meta.json", "0.19.0").async_scheduling is False
