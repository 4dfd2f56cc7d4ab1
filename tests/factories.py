"""Factory helpers for small canonical traces built by hand."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from agentreplay.kv.segment_pool import Segment
from agentreplay.request import ProgramInfo, Request
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


def make_request(
    program: int,
    prompt: int,
    *,
    target_out: int = 1,
    reuse: int = 0,
    turn: int | None = None,
    release_s: float = 0.0,
    info: ProgramInfo | None = None,
) -> Request:
    """A call of ``program`` (turn 0 of it, global turn ``turn``, default the program's index) with its own empty
    history segment and no shared prefix, as the scheduler and the routers see one."""
    return Request(
        turn=program if turn is None else turn,
        program=program,
        turn_idx=0,
        prompt=prompt,
        target_out=target_out,
        reuse=reuse,
        pfx=None,
        prog=Segment(("prog", program), 0, 0),
        base=0,
        release_s=release_s,
        info=ProgramInfo(0.0) if info is None else info,
    )
