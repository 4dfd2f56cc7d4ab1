"""Tool-duration estimator for sources that log only one timestamp per LLM call.

mini-swe-agent 1.x logs the provider response's ``created`` stamp (1-s resolution) and LMCache logs the
request time: neither logs when the tool ran. Both stamps mark the *start* of an LLM call (OpenAI-style
``created`` is stamped when generation starts and is repeated in the first streamed chunk), so the gap
between call i and call i+1 is

    gap_i = llm_latency_i + tool_i + agent overhead_i.

DESIGN §3 phrases the estimate as "gap minus the estimated LLM latency of the next call", which holds when
the stamp marks the *end* of a call; with start stamps the latency to subtract is call i's own. Which call
is subtracted is the ``stamp`` argument, so a source whose stamp marks responses can say so.

LLM latency is modelled as ``output_tokens * s_per_token``: a per-run decode time per token taken as a low
percentile (default 5th) of ``gap / output_tokens`` over all gaps of the run. The low percentile picks the
gaps where the tool took almost no time, so it approximates pure generation time per token (prefill and
queueing are folded in). Tool time is then ``max(0, gap - latency)``, marked ``estimated``.

Assumptions, stated so users can judge them: decode speed is constant within a run; prefill time is small
next to decode time (true for these traces, 50:1 input:output but mostly cached prompts); the agent's own
overhead (parsing, container exec set-up) is counted as tool time; 1-s stamp resolution makes single
estimates noisy by up to +-1 s while sums over many turns are unbiased.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Stamp = Literal["request", "response"]


def fit_seconds_per_token(gaps_s: np.ndarray, output_tokens: np.ndarray, percentile: float = 5.0) -> float:
    """Low percentile of ``gap / output_tokens`` over gaps with output > 0 and gap > 0; 0.0 if none."""
    gaps_s = np.asarray(gaps_s, dtype=float)
    out = np.asarray(output_tokens, dtype=float)
    ok = (out > 0) & (gaps_s > 0) & np.isfinite(gaps_s)
    if not ok.any():
        return 0.0
    return float(np.percentile(gaps_s[ok] / out[ok], percentile))


def estimate_tool_durations(
    stamps_s: Sequence[float], output_tokens: Sequence[int], s_per_token: float, stamp: Stamp = "request"
) -> list[float | None]:
    """Estimated tool duration after each call of one program; the last call gets ``None``.

    ``stamps_s`` must be non-decreasing (collectors check and report that before calling).
    """
    t = np.asarray(stamps_s, dtype=float)
    out = np.asarray(output_tokens, dtype=float)
    n = len(t)
    result: list[float | None] = []
    for i in range(n - 1):
        gap = t[i + 1] - t[i]
        latency = (out[i] if stamp == "request" else out[i + 1]) * s_per_token
        result.append(max(0.0, float(gap - latency)))
    if n:
        result.append(None)
    return result


def program_gaps(
    stamps_s: Sequence[float], output_tokens: Sequence[int], stamp: Stamp = "request"
) -> tuple[np.ndarray, np.ndarray]:
    """The (gap, output tokens of the call whose latency the gap contains) pairs of one program."""
    t = np.asarray(stamps_s, dtype=float)
    out = np.asarray(output_tokens, dtype=float)
    if len(t) < 2:
        return np.empty(0), np.empty(0)
    gaps = np.diff(t)
    return gaps, (out[:-1] if stamp == "request" else out[1:])
