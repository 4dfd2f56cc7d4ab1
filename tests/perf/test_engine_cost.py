"""The engine cost fitted end to end, as a simulation prices with it (``[hardware] engine_cost = "fitted"``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentreplay.perf import engine_cost as E
from agentreplay.perf import load_gpu
from agentreplay.perf.registry import pricer_from_names


def test_apply_terms_is_the_mapping_the_validation_replays_use() -> None:
    from validation.e2e.inference_perf_fit import EngineCost

    eff = load_gpu("h100-sxm").efficiency
    for cost in (
        EngineCost(),
        EngineCost(fixed_ms=0.3, per_seq_us=2.5, kernel_gap_us=3.5, sampler_bytes_per_logit=400.0),
        EngineCost(attn_decode_efficiency=0.9, custom_allreduce_us=1.5),
    ):
        assert E.apply_terms(eff, cost.as_dict()) == cost.efficiency(eff)
    # a term left out keeps the GPU's value; a null decode attention is tied to the weight-streaming efficiency
    out = E.apply_terms(eff, {"fixed_ms": 0.25})
    assert out.framework_overhead_ms == 0.25 and out.kernel_overhead_us == eff.kernel_overhead_us
    assert out.attn_decode_efficiency == eff.bandwidth_efficiency


def test_fitted_efficiency_only_on_the_gpu_the_fit_saw(tmp_path: Path) -> None:
    data, path = E.read()
    h100 = load_gpu("h100-sxm")
    fitted = E.fitted_efficiency(h100)
    assert fitted.kernel_overhead_us == data["fitted"]["kernel_gap_us"]
    assert fitted.sampler_bytes_per_logit == data["fitted"]["sampler_bytes_per_logit"]
    assert fitted.framework_overhead_ms == data["fitted"]["fixed_ms"]
    with pytest.raises(ValueError, match=r"fitted on h100-sxm, not on 'a100-80gb'") as err:
        E.fitted_efficiency(load_gpu("a100-80gb"))
    assert str(path) in str(err.value)
    # a catalog folder whose engine_cost.json lacks the fit is named in the error
    (tmp_path / "gpus.toml").write_text("")
    (tmp_path / "engine_cost.json").write_text(json.dumps({"what": "nothing"}))
    with pytest.raises(ValueError, match=r"engine_cost.json: field 'fitted'"):
        E.read(tmp_path / "gpus.toml")


def test_pricer_with_the_fitted_engine_cost() -> None:
    roof = pricer_from_names("roofline", "h100-sxm", "llama-3.1-70b", tp=8, cudagraph_sizes=None, engine_cost="fitted")
    assert roof.efficiency == E.fitted_efficiency(load_gpu("h100-sxm"))
    base = pricer_from_names("roofline", "h100-sxm", "llama-3.1-70b", tp=8, cudagraph_sizes=None)
    assert base.efficiency == load_gpu("h100-sxm").efficiency
    assert roof.decode_only_time_s(32, 32 * 2000) != base.decode_only_time_s(32, 32 * 2000)
    with pytest.raises(ValueError, match="prices with the roofline"):
        pricer_from_names("refined", "h100-sxm", "llama-3.1-70b", tp=8, engine_cost="fitted")
    with pytest.raises(ValueError, match="engine_cost='nope'"):
        pricer_from_names("roofline", "h100-sxm", "llama-3.1-70b", tp=8, engine_cost="nope")


def test_a_simulation_prices_with_the_fitted_engine_cost_only_with_deployment_kernels() -> None:
    from agentreplay.sim import SimConfig, simulate
    from agentreplay.sim.errors import ConfigError
    from tests.factories import make_trace

    trace = make_trace([[(3000, 60, None)]] * 3)
    base = SimConfig().replace(workload={"concurrency": 3}, hardware={"deployment_kernels": True})
    assert base.hardware.gpu == "h100-sxm" and base.hardware.engine_cost == "catalog"
    with pytest.raises(ConfigError, match="engine_cost"):
        base.replace(hardware={"deployment_kernels": False, "engine_cost": "fitted"})
    cat = simulate(trace, base, findings=False, error_bands="none")
    fit = simulate(trace, base.replace(hardware={"engine_cost": "fitted"}), findings=False, error_bands="none")
    assert float(fit.programs["jct_s"].sum()) != float(cat.programs["jct_s"].sum())
