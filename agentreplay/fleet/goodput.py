"""Task-level goodput against a deadline, and TTFT by step index.

Goodput = programs that finished within their deadline / programs attempted. The deadline is absolute
(``deadline_s``: JCT <= D seconds) or relative (``deadline_x``: JCT <= x * the program's uncontended JCT,
:mod:`agentreplay.fleet.uncontended`). Attempted = the programs of ``programs.parquet`` plus those the run's
admission removed before their first call (``summary.json`` ``rejected.programs_removed``: never started, so
never within a deadline). A program cut short by ``max_model_len`` (``rejected.programs_cut``) did not finish its
task: it counts as missed when the trace is given (its simulated turns are fewer than the trace's); without the
trace it cannot be told apart from a finished program, and the result says how many such programs the run had.

TTFT by step: the run's per-turn TTFT (first token - release) grouped by the turn's 1-based step; steps 1-10
alone, then bins 11-20, 21-50, 51-100, 101-200, 201+. p50 / p99 are numpy's linear-interpolation percentiles.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: Upper edges (inclusive) of the step bins beyond step 10; the last bin is open.
STEP_BIN_EDGES = (10, 20, 50, 100, 200)


def goodput(
    jct_s: np.ndarray, deadline_s: np.ndarray, *, removed: int = 0, failed: np.ndarray | None = None
) -> dict[str, Any]:
    """Goodput of programs with JCTs ``jct_s`` against per-program ``deadline_s``; ``removed`` programs were
    attempted but never ran; ``failed`` marks programs that ran but did not complete their task."""
    jct = np.asarray(jct_s, dtype=float)
    ok = jct <= np.asarray(deadline_s, dtype=float)
    if failed is not None:
        ok &= ~np.asarray(failed, dtype=bool)
    attempted = len(jct) + removed
    met = int(ok.sum())
    return {"attempted": attempted, "met": met, "goodput": met / attempted if attempted else float("nan")}


def deadlines(
    programs: pd.DataFrame, *, deadline_s: float | None = None, deadline_x: float | None = None
) -> np.ndarray:
    """Per-program deadline: ``deadline_s`` for all, or ``deadline_x`` times ``uncontended_jct_s``."""
    if (deadline_s is None) == (deadline_x is None):
        raise ValueError("give exactly one of deadline_s and deadline_x")
    if deadline_s is not None:
        if not deadline_s > 0:
            raise ValueError(f"deadline {deadline_s!r} s: must be > 0")
        return np.full(len(programs), float(deadline_s))
    assert deadline_x is not None
    if not deadline_x >= 1:
        raise ValueError(f"deadline multiple {deadline_x!r}: must be >= 1 (no program beats its uncontended JCT)")
    return deadline_x * programs["uncontended_jct_s"].to_numpy(float)


def goodput_curve(
    jct_s: np.ndarray, base_s: np.ndarray, xs: np.ndarray, *, removed: int = 0, failed: np.ndarray | None = None
) -> pd.DataFrame:
    """Goodput at each deadline ``x * base_s`` for ``x`` in ``xs`` (the figure's curve)."""
    rows = [
        {"x": float(x), **goodput(jct_s, x * np.asarray(base_s, dtype=float), removed=removed, failed=failed)}
        for x in xs
    ]
    return pd.DataFrame(rows)


def step_bin(step: np.ndarray) -> np.ndarray:
    """Label of each 1-based step: "1" .. "10", then "11-20", "21-50", "51-100", "101-200", "201+"."""
    step = np.asarray(step, dtype=np.int64)
    labels = np.array([str(s) for s in step], dtype=object)
    lo = STEP_BIN_EDGES[0] + 1
    for hi in STEP_BIN_EDGES[1:]:
        labels[(step >= lo) & (step <= hi)] = f"{lo}-{hi}"
        lo = hi + 1
    labels[step >= lo] = f"{lo}+"
    return labels


def bin_order(labels: pd.Series) -> pd.Series:
    """Sort key of :func:`step_bin` labels (their first step)."""
    return labels.str.split(r"[-+]", regex=True).str[0].astype(int)


def ttft_by_step(turns: pd.DataFrame) -> pd.DataFrame:
    """Per step bin: turns, TTFT p50 / p99 / mean, queueing p50 (seconds), in step order."""
    df = pd.DataFrame(
        {
            "step": step_bin(turns["turn_idx"].to_numpy() + 1),
            "ttft_s": turns["ttft_s"].to_numpy(float),
            "queued_s": turns["queued_s"].to_numpy(float),
        }
    )
    g = df.groupby("step", sort=False)
    res = pd.DataFrame(
        {
            "turns": g.size(),
            "ttft_p50_s": g["ttft_s"].quantile(0.5),
            "ttft_p99_s": g["ttft_s"].quantile(0.99),
            "ttft_mean_s": g["ttft_s"].mean(),
            "queued_p50_s": g["queued_s"].quantile(0.5),
        }
    ).reset_index()
    return res.sort_values("step", key=bin_order, kind="stable").reset_index(drop=True)
