"""Synthetic fan-out: add sub-agent programs to a trace (orchestrator turns spawning children, then a join).

Method (``fan_out``), every draw from one ``numpy.random.Generator(seed)``:

1. **Which turns spawn**: every turn of a source program but its last spawns with probability ``prob``
   (independently), so the expected share of spawning turns among non-last turns is ``prob``.
2. **How many children**: exactly ``fanout`` per spawning turn (the fixed width of a parallel sub-agent call,
   e.g. Claude Code's Task tool launched several times in one message).
3. **Their length and turns**: each child copies the turns of a *template* program drawn uniformly from the
   source, so child turn counts follow the trace's program-length distribution (optionally cut at
   ``max_child_turns``); its tokens, tool classes and tool durations are the template's.
4. **Shared prefix**: ``share = "context"``: the child's prompt starts with the parent's whole prompt at the
   spawning turn (the orchestrator hands its context to the sub-agent: Claude Code's *fork* sub-agent, which
   "has the same system prompt, tools, and model as the parent" and inherits the conversation); ``share =
   "system"``: only the parent's shared system prompt (Claude Code's ordinary sub-agent "starts with a fresh
   context window" holding its system prompt and the delegation message; sources: the Agent / Task tool pages
   mintlify.com/VineeTagarwaL-code/claude-code/guides/multi-agent and github.com/xsyetopz/claudetto/wiki/Subagents,
   which quote the official documentation; fan-out / fan-in with parallel sub-agents:
   huggingface.co/learn/context-course/unit4/using-subagents). A child turn's prompt is ``shared + (template
   prompt - template system prefix)``, its ``reused_tokens`` shifted the same way (turn 0's stays 0: the shared
   part is the parent's, see :mod:`agentreplay.sim.dag`). Prompts are capped at the source's largest prompt (a
   child is cut after the first turn that hits the cap), so a fan-out trace fits wherever the source does.
5. **Links**: ``parent_program_id`` / ``parent_turn_idx`` (schema 3), ``spawn_delay_s = delay_s``; children
   inherit the parent's task id, agent, model and shared prefix id; ids are ``<parent>/sub<turn>.<k>``.

Only source programs spawn (one level): a sub-agent spawning its own sub-agents is left to traces that record it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from agentreplay.trace.io import Trace, TraceError
from agentreplay.trace.schema import PROGRAMS, TURNS

Share = Literal["context", "system"]
SOURCE = "synthetic-fanout"


@dataclass(frozen=True, slots=True)
class FanOutStats:
    """What :func:`fan_out` drew."""

    candidate_turns: int  #: non-last turns of the source (each may spawn)
    spawning_turns: int
    children: int
    child_turns: int

    @property
    def spawn_share(self) -> float:
        return self.spawning_turns / self.candidate_turns if self.candidate_turns else 0.0


def fan_out(
    trace: Trace,
    *,
    fanout: int = 4,
    prob: float = 0.05,
    share: Share = "context",
    seed: int = 0,
    max_child_turns: int | None = 10,
    delay_s: float = 0.0,
) -> tuple[Trace, FanOutStats]:
    """``trace`` plus sub-agent children (module docstring); the source programs come first, unchanged."""
    if fanout < 1:
        raise ValueError(f"fanout: must be >= 1, got {fanout}")
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"fanout prob: must be in [0, 1], got {prob}")
    if share not in ("context", "system"):
        raise ValueError(f"share: must be 'context' or 'system', got {share!r}")
    if max_child_turns is not None and max_child_turns < 1:
        raise ValueError(f"max_child_turns: must be >= 1, got {max_child_turns}")
    if delay_s < 0:
        raise ValueError(f"spawn delay: must be >= 0 s, got {delay_s}")
    progs = trace.programs.reset_index(drop=True)
    turns = trace.turns.sort_values(["program_id", "turn_idx"], kind="stable")
    by_prog = {pid: df.reset_index(drop=True) for pid, df in turns.groupby("program_id", sort=False)}
    if progs.empty or not by_prog:
        raise TraceError("source trace has no programs with turns")
    pids = [p for p in progs["program_id"].tolist() if p in by_prog]
    row_of = {p: i for i, p in enumerate(progs["program_id"].tolist())}
    cap = int(turns["input_tokens"].max())
    rng = np.random.default_rng(seed)
    new_progs: list[dict[str, object]] = []
    new_turns: list[pd.DataFrame] = []
    candidates = spawning = child_turns = 0
    for pid in pids:
        own = by_prog[pid]
        prow = progs.iloc[row_of[pid]]
        n = len(own)
        candidates += n - 1
        spawn = rng.random(n - 1) < prob if n > 1 else np.zeros(0, dtype=bool)
        sys_tokens = int(prow["shared_prefix_tokens"])
        for t in np.flatnonzero(spawn).tolist():
            spawning += 1
            shared = int(own["input_tokens"][t]) if share == "context" else sys_tokens
            for k in range(fanout):
                tmpl_id = pids[int(rng.integers(len(pids)))]
                child = _child_turns(by_prog[tmpl_id], progs.iloc[row_of[tmpl_id]], shared, cap, max_child_turns)
                cid = f"{pid}/sub{t}.{k}"
                child["program_id"] = cid
                child_turns += len(child)
                new_turns.append(child)
                new_progs.append(
                    {
                        **prow.to_dict(),
                        "program_id": cid,
                        "source": SOURCE,
                        "n_turns": len(child),
                        "resolved": None,
                        "arrival_s": None,
                        "parent_program_id": pid,
                        "parent_turn_idx": t,
                        "spawn_delay_s": delay_s,
                    }
                )
    out_progs = pd.concat([progs, pd.DataFrame(new_progs, columns=[f.name for f in PROGRAMS])], ignore_index=True)
    for col in ("parent_program_id", "parent_turn_idx", "spawn_delay_s"):
        out_progs[col] = out_progs[col].astype(object).where(out_progs[col].notna(), None)
    out_turns = pd.concat([turns, *new_turns], ignore_index=True)[[f.name for f in TURNS]]
    stats = FanOutStats(candidates, spawning, len(new_progs), child_turns)
    return Trace(out_progs[[f.name for f in PROGRAMS]], out_turns, None), stats


def _child_turns(tmpl: pd.DataFrame, tprow: pd.Series, shared: int, cap: int, max_turns: int | None) -> pd.DataFrame:
    """The template's turns re-based on ``shared`` leading tokens (capped, cut, last turn without a tool)."""
    t = tmpl.copy() if max_turns is None else tmpl.iloc[:max_turns].copy()
    own_prefix = min(int(tprow["shared_prefix_tokens"]), int(t["input_tokens"].min()))
    shift = shared - own_prefix
    inp = t["input_tokens"].to_numpy(dtype=np.int64) + shift
    over = np.flatnonzero(inp >= cap)
    if len(over):
        t, inp = t.iloc[: over[0] + 1].copy(), np.minimum(inp[: over[0] + 1], cap)
    reused = t["reused_tokens"].to_numpy(dtype=np.int64)
    reused = np.where(reused > 0, np.minimum(reused + shift, inp), 0)
    reused[0] = 0
    t["input_tokens"] = inp
    t["reused_tokens"] = reused
    t["turn_idx"] = np.arange(len(t), dtype=np.int32)
    last = len(t) - 1
    for col in ("tool_duration_s", "tool_duration_kind", "tool_name"):
        t[col] = t[col].astype(object)
        t.iloc[last, t.columns.get_loc(col)] = None
    t.iloc[last, t.columns.get_loc("tool_class")] = "submit"
    return t.reset_index(drop=True)
