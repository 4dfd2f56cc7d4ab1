"""The measured-table pricer (collectors.live.engine_profile_pricer): fit, protocol, robustness. Fast, no engine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentreplay.perf.model import IterationPricer
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import simulate
from collectors.live.engine_profile_pricer import PricerCoeffs, ProfilePricer
from collectors.measured.common import component, frame
from tests.factories import make_trace

TRUE = PricerCoeffs(a0=2.8e-3, a1=1.0e-3, c=3.0e-10, p=8.0e-3, b=1.0e-4, d=1.5e-8)


def _profile(k: PricerCoeffs, noise: float = 0.0, outliers: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for n in (16, 128, 512, 1024, 2048, 3072):
        t = k.a0 + k.a1 + k.p + k.b * n + k.d * n * n / 2
        rows.append(
            component(
                "c",
                "prefill_iteration",
                "model",
                t * (1 + noise * rng.standard_normal()),
                "median",
                phase="prefill",
                num_tokens=n,
                batch_size=1,
                context_tokens=0,
            )
        )
    for ctx in (144, 528, 912):
        for b in (1, 2, 4, 8):
            t = k.a0 + k.a1 * b + k.c * b * ctx
            rows.append(
                component(
                    "c",
                    "decode_iteration",
                    "model",
                    t * (1 + noise * rng.standard_normal()),
                    "median",
                    phase="decode",
                    num_tokens=b,
                    batch_size=b,
                    context_tokens=ctx,
                )
            )
    if outliers:  # a streaming artefact near 0 and a point taken while another process held the cores
        rows.append(
            component(
                "c",
                "decode_iteration",
                "model",
                1.7e-5,
                "median",
                phase="decode",
                num_tokens=2,
                batch_size=2,
                context_tokens=144,
            )
        )
        rows.append(
            component(
                "c",
                "prefill_iteration",
                "model",
                0.17,
                "median",
                phase="prefill",
                num_tokens=16,
                batch_size=1,
                context_tokens=0,
            )
        )
    return frame(rows, "component")


def test_exact_profile_recovers_the_coefficients() -> None:
    p = ProfilePricer.from_component(_profile(TRUE))
    for name in ("a0", "a1", "c", "b", "d"):
        assert getattr(p.coeffs, name) == pytest.approx(getattr(TRUE, name), rel=1e-3, abs=1e-12), name
    assert p.coeffs.p == pytest.approx(TRUE.p, rel=1e-3)
    assert isinstance(p, IterationPricer)


def test_outliers_barely_move_the_fit() -> None:
    p = ProfilePricer.from_component(_profile(TRUE, noise=0.02, outliers=True))
    assert p.decode_step_time_s(4, 512) == pytest.approx(TRUE.a0 + 4 * TRUE.a1 + TRUE.c * 4 * 512, rel=0.1)
    want = TRUE.a0 + TRUE.p + TRUE.b * 1024 + TRUE.d * 1024 * 512
    assert p.prefill_time_s(1024) == pytest.approx(want, rel=0.1)


def test_iteration_arithmetic_and_monotonicity() -> None:
    p = ProfilePricer(TRUE)
    assert p.iteration_time_s([], []) == 0.0
    a, c = p.decode_coeffs(3)
    assert p.iteration_time_s([], [100, 200, 300]) == pytest.approx(a + c * 600)
    mixed = p.iteration_time_s([(256, 1024, True)], [100, 200])
    assert mixed == pytest.approx(
        TRUE.a0 + 2 * TRUE.a1 + TRUE.c * 300 + TRUE.p + TRUE.b * 256 + TRUE.d * 256 * (1024 + 128)
    )
    assert p.iteration_time_s([(257, 1024)], [100]) > p.iteration_time_s([(256, 1024)], [100])
    assert p.iteration_time_s([(256, 1025)], [100]) > p.iteration_time_s([(256, 1024)], [100])
    with pytest.raises(ValueError):
        p.iteration_time_s([(0, 0)], [])
    with pytest.raises(ValueError):
        ProfilePricer(PricerCoeffs(a0=-1.0, a1=0, c=0, p=0, b=0, d=0))


def test_too_small_a_profile_is_refused() -> None:
    comp = _profile(TRUE)
    with pytest.raises(ValueError, match="decode_iteration"):
        ProfilePricer.from_component(comp[comp["op"] == "prefill_iteration"])


def test_simulate_accepts_the_pricer() -> None:
    trace = make_trace(
        [[(500, 20, 1.0), (700, 30, 0.5), (900, 10, None)], [(300, 50, 2.0), (600, 5, None)]], shared_prefix_tokens=64
    )
    res = simulate(
        trace, SimConfig().replace(cache={"num_gpu_blocks": 4096, "block_size": 32}), perf=ProfilePricer(TRUE)
    )
    assert np.isfinite(res.programs["jct_s"]).all()
