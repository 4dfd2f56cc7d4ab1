"""Trace card: the figures a serving engineer wants before replaying a trace."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentreplay.trace.io import Trace
from agentreplay.trace.taxonomy import TOOL_CLASSES

QUANTILES = (0.5, 0.9, 0.99)


def _q(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"mean": float("nan"), **{f"p{int(q * 100)}": float("nan") for q in QUANTILES}, "max": float("nan")}
    return {
        "mean": float(np.mean(values)),
        **{f"p{int(q * 100)}": float(np.quantile(values, q)) for q in QUANTILES},
        "max": float(np.max(values)),
    }


def describe(trace: Trace) -> dict[str, Any]:
    """Summary statistics of a trace as plain data (JSON-serialisable).

    Ratios are of sums: ``input_output_ratio = sum(input) / sum(output)``; ``reuse_ratio = sum(reused) /
    sum(input)`` (share of prompt tokens that extend the previous turn's context); ``shared_prefix_ratio`` =
    share of prompt tokens inside the cross-program shared prefix.
    """
    p, t = trace.programs, trace.turns
    inp = t["input_tokens"].to_numpy(dtype=float)
    out = t["output_tokens"].to_numpy(dtype=float)
    per_prog_in = t.groupby("program_id")["input_tokens"].sum().to_numpy(dtype=float)
    shared = t.merge(p[["program_id", "shared_prefix_tokens"]], on="program_id")
    shared_tokens = np.minimum(shared["shared_prefix_tokens"], shared["input_tokens"]).sum()
    mix = t["tool_class"].value_counts()
    durations = {}
    for cls in TOOL_CLASSES:
        d = t.loc[(t["tool_class"] == cls) & t["tool_duration_s"].notna(), "tool_duration_s"].to_numpy(dtype=float)
        if len(d):
            durations[cls] = {"n": len(d), **_q(d)}
    kinds = t["tool_duration_kind"].value_counts().to_dict()
    return {
        "programs": len(p),
        "turns": len(t),
        "sources": sorted(p["source"].unique().tolist()),
        "resolved": None if p["resolved"].isna().all() else int(p["resolved"].fillna(False).sum()),
        "turns_per_program": _q(p["n_turns"].to_numpy(dtype=float)),
        "input_tokens_per_turn": _q(inp),
        "output_tokens_per_turn": _q(out),
        "input_tokens_per_program": _q(per_prog_in),
        "input_tokens_total": int(inp.sum()),
        "output_tokens_total": int(out.sum()),
        "input_output_ratio": float(inp.sum() / out.sum()) if out.sum() else float("inf"),
        "reuse_ratio": float(t["reused_tokens"].sum() / inp.sum()) if inp.sum() else 0.0,
        "shared_prefix_ratio": float(shared_tokens / inp.sum()) if inp.sum() else 0.0,
        "tokens_kind": t["tokens_kind"].value_counts().to_dict(),
        "tool_class_mix": {cls: int(mix.get(cls, 0)) for cls in TOOL_CLASSES},
        "tool_duration_kind": {str(k): int(v) for k, v in kinds.items()},
        "tool_duration_s": durations,
    }
