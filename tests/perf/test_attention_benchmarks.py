"""The attention benchmarks' own arithmetic: the time scale that puts ``skew.csv`` shots on ``attention.csv``'s."""

from __future__ import annotations

import importlib.util
import sys

import pandas as pd
import pytest

from tests.conftest import ROOT, shared_path


def _mixed():
    spec = importlib.util.spec_from_file_location("attention_mixed", ROOT / "benchmarks" / "attention_mixed.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_skew_scale_is_the_median_ratio_over_matched_reference_shots() -> None:
    grid = pd.DataFrame(
        {
            "prefill_chunk": [16, 16, 0],
            "kv_prefill": [0, 0, 0],
            "n_decode": [2, 4, 2],
            "kv_decode": [512, 512, 512],
            "time_us": [10.0, 20.0, 7.0],
        }
    )
    skew = pd.DataFrame(
        {
            "pc": [16, 16, 16, 32],
            "kp": [0, 0, 0, 0],
            "n": [2, 4, 4, 2],
            "kv_big": [512, 512, 512, 512],
            "t_max_us": [30.0, 61.0, 200.0, 1.0],
        }
    )  # the last shot is not on the grid
    scale, matched = _mixed().skew_scale(skew, grid)
    assert matched == 3
    assert scale == pytest.approx(3.05)  # ratios 3.0, 3.05 and 10: the median, not the mean


def test_skew_file_times_three_measurement_iterations_of_the_grid() -> None:
    # what the benchmark divides by: measured, not assumed (meta.yaml: measurement_iterations 3)
    root = shared_path(
        "measurements",
        "profiles-llmservingsim",
        "profiler",
        "perf",
        "RTX4090",
        "meta-llama",
        "Llama-3.1-8B",
        "bf16",
        "tp1",
    )
    scale, matched = _mixed().skew_scale(pd.read_csv(root / "skew.csv"), pd.read_csv(root / "attention.csv"))
    assert matched > 10_000
    assert scale == pytest.approx(3.0, rel=0.03)
