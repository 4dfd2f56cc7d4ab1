"""Tiny hand-made simulate outputs for the fleet tests."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd


def turns_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """A ``turns.parquet``-like frame; every column the fleet reads, defaults 0 unless given per row."""
    base = {
        "instance": 0,
        "release_s": 0.0,
        "first_token_s": 0.0,
        "finish_s": 0.0,
        "queued_s": 0.0,
        "ttft_s": 0.0,
        "tpot_s": 0.0,
        "input_tokens": 0,
        "output_tokens": 1,
        "cached_tokens": 0,
        "cached_prefix_tokens": 0,
        "reloaded_dram_tokens": 0,
        "reloaded_cxl_tokens": 0,
        "reloaded_remote_tokens": 0,
        "computed_prompt_tokens": 0,
        "recomputed_tokens": 0,
        "preemptions": 0,
        "tool_s": float("nan"),
    }
    return pd.DataFrame([{**base, **r} for r in rows])
