"""Factory helpers for small canonical traces built by hand."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from agentreplay.trace.io import Trace
from agentreplay.trace.schema import PROGRAMS, TURNS


def make_trace(
    programs: Sequence[Sequence[tuple[int, int, float | None]]],
    *,
    shared_prefix_tokens: int = 0,
    tool_class: str = "test",
) -> Trace:
    """A trace from per-program lists of ``(input_tokens, output_tokens, tool_duration_s)`` turns.

    Contexts are append-only: ``reused_tokens`` = previous input + output (capped at this input).
    """
    prog_rows, turn_rows = [], []
    for p, turns in enumerate(programs):
        pid = f"p{p}"
        prog_rows.append(
            {
                "program_id": pid,
                "source": "test",
                "task_id": f"task{p}",
                "agent": "test",
                "model": "test",
                "n_turns": len(turns),
                "resolved": None,
                "arrival_s": None,
                "shared_prefix_id": "sys" if shared_prefix_tokens else None,
                "shared_prefix_tokens": shared_prefix_tokens,
            }
        )
        prev = None
        for t, (inp, out, tool) in enumerate(turns):
            turn_rows.append(
                {
                    "program_id": pid,
                    "turn_idx": t,
                    "input_tokens": inp,
                    "output_tokens": out,
                    "reused_tokens": 0 if prev is None else min(prev, inp),
                    "provider_cached_tokens": None,
                    "reasoning_tokens": None,
                    "tokens_kind": "exact",
                    "tool_class": tool_class if t < len(turns) - 1 else "submit",
                    "tool_name": None,
                    "tool_duration_s": tool if t < len(turns) - 1 else None,
                    "tool_duration_kind": "measured" if t < len(turns) - 1 else None,
                    "llm_latency_s": None,
                    "t_request_s": None,
                    "t_response_s": None,
                }
            )
            prev = inp + out
    return Trace(
        pd.DataFrame(prog_rows, columns=[f.name for f in PROGRAMS]),
        pd.DataFrame(turn_rows, columns=[f.name for f in TURNS]),
    )
