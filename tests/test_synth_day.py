"""The chunked day generator (agentreplay.synth_day): per chunk the programs of ``synthesize`` given the chunk's
generator, chunks independent of each other, and across chunk sizes the same distribution (equality is
impossible there: another split draws another stream of random numbers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from agentreplay.sim.workload import compile_trace
from agentreplay.synth import synthesize
from agentreplay.synth_day import day_workload
from agentreplay.trace.io import read_trace

ROOT = Path(__file__).resolve().parents[1]
FIELDS = [
    "program_ids",
    "task_ids",
    "turn_start",
    "input_tokens",
    "output_tokens",
    "reused_tokens",
    "tool_s",
    "tool_class",
    "arrival_s",
    "prefix_ids",
    "prefix_tokens",
    "chains",
    "seg_bounds",
]


@pytest.fixture(scope="module")
def source():
    return read_trace(ROOT / "datasets" / "swebench-verified")


def _assert_same(a, b) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), f
        else:
            assert x == y, f


def test_one_chunk_is_the_compiled_synthetic_trace(source) -> None:
    """Same generator, same draws: the compact workload equals compile_trace(synthesize(...))."""
    n = 700
    rng = np.random.default_rng(np.random.SeedSequence(3).spawn(1)[0])  # chunk 0's generator
    _assert_same(day_workload(source, n, seed=3, chunk_programs=1000), compile_trace(synthesize(source, n, seed=rng)))


def test_a_chunk_does_not_depend_on_the_others(source) -> None:
    a = day_workload(source, 900, seed=1, chunk_programs=300)
    b = day_workload(source, 750, seed=1, chunk_programs=300)  # chunks 0, 1 the same; chunk 2 shorter
    assert a.program_ids[:750] == b.program_ids
    end = int(b.turn_start[600])
    assert np.array_equal(a.turn_start[:601], b.turn_start[:601])
    for f in ("input_tokens", "output_tokens", "reused_tokens"):
        assert np.array_equal(getattr(a, f)[:end], getattr(b, f)[:end]), f
    assert a.tool_class[:end] == b.tool_class[:end]


def test_chunked_and_one_shot_draw_the_same_distribution(source) -> None:
    """4 chunks of 1,500 vs synthesize() of 6,000 (another random stream): two-sample KS tests on turns per
    program, prompt and output tokens and tool seconds do not reject at 0.1 % (seeds fixed: deterministic), and the
    means agree within 3 %."""
    a = day_workload(source, 6000, seed=11, chunk_programs=1500)
    b = compile_trace(synthesize(source, 6000, seed=12))
    pairs = {
        "turns per program": (np.diff(a.turn_start), np.diff(b.turn_start)),
        "input tokens": (a.input_tokens, b.input_tokens),
        "output tokens": (a.output_tokens, b.output_tokens),
        "tool s": (a.tool_s[~np.isnan(a.tool_s)], b.tool_s[~np.isnan(b.tool_s)]),
    }
    for name, (x, y) in pairs.items():
        assert stats.ks_2samp(x, y).pvalue > 1e-3, name
        assert abs(x.mean() / y.mean() - 1) < 0.03, name


def test_bad_arguments_are_named(source) -> None:
    with pytest.raises(ValueError, match="chunk_programs must be >= 1, got 0"):
        day_workload(source, 10, chunk_programs=0)
    with pytest.raises(ValueError, match="n_programs must be >= 1, got 0"):
        day_workload(source, 0)
