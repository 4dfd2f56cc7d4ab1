"""Thinking budget: cap the reasoning tokens of every turn (``[thinking]``, in
:mod:`agentreplay.features.thinking.config`).

A reasoning model spends part of a turn's output on thinking: the trace's ``reasoning_tokens`` (included in
``output_tokens``, as providers bill them; :mod:`collectors.mini_swe_agent`). A budget (Anthropic's
``thinking.budget_tokens``; OpenAI's ``reasoning.effort``; Gemini's ``thinkingBudget``) caps it. The rule here,
per turn with ``r`` recorded reasoning tokens (``min(r, out)``: a usage block claiming more reasoning than output
is read as all-reasoning) and budget ``B``:

    cut = max(0, min(r, out) - B),    output' = max(1, out - cut)

(an engine emits at least one token). The answer after the thinking is unchanged: a counterfactual on decode
length only; whether the task still succeeds with less thinking is outside the simulator.

What happens to the next turn's input (``reasoning_in_context``):

- ``false`` (the default): earlier turns' thinking is not in later prompts. This is what the bundled trace shows:
  the next prompt is the previous prompt + the visible answer + the observation, so the collector's
  ``reused_tokens`` stops at the previous input when reasoning was produced (:mod:`collectors.mini_swe_agent`, "the
  next prompt does not contain them"): on every turn with reasoning, the next input is at least the input plus the
  visible output (input + output - reasoning), give or take a few tokens. It is also the documented provider
  behaviour: Anthropic strips previous turns' thinking blocks from the context (docs.anthropic.com, "Context
  windows", extended thinking: ``context_window = (input_tokens - previous_thinking_tokens) +
  current_turn_tokens``), and OpenAI's Responses API drops earlier reasoning items between turns (OpenAI cookbook,
  "Better performance from reasoning models using the Responses API"). Later turns' inputs stay as recorded.
- ``true``: the thinking stays in the context (Anthropic keeps the thinking block inside one tool-use loop): every
  later turn of the program has ``input`` and ``reused`` smaller by the cuts of the turns before it.

A turn without ``reasoning_tokens`` recorded (null) is left uncapped; :func:`apply` counts such turns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentreplay.features.thinking.config import ThinkingConfig
from agentreplay.sim.workload import Workload


@dataclass(frozen=True, slots=True)
class ThinkingStats:
    turns: int  #: turns in the workload
    turns_with_reasoning: int  #: turns with reasoning_tokens > 0
    turns_unrecorded: int  #: turns without reasoning_tokens (null): left uncapped
    turns_capped: int  #: turns whose output the budget shortened
    reasoning_tokens: int  #: recorded reasoning tokens (as counted by the rule: min(r, out))
    cut_tokens: int  #: output tokens removed
    input_tokens_removed: int  #: prompt tokens removed from later turns (reasoning_in_context only)

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def cut_tokens(output: np.ndarray, reasoning: np.ndarray, budget: int) -> np.ndarray:
    """Output tokens the budget removes per turn (NaN reasoning: not recorded, 0), so that at least 1 is left."""
    r = np.nan_to_num(reasoning, nan=0.0).astype(np.int64)
    r = np.minimum(np.maximum(r, 0), output)
    return np.minimum(np.maximum(r - budget, 0), np.maximum(output - 1, 0))


def apply(w: Workload, cfg: ThinkingConfig) -> tuple[Workload, ThinkingStats]:
    """``w`` under the budget (module docstring) and what it changed; ``w`` itself when the budget is off."""
    n = w.n_turns
    reasoning = w.reasoning_tokens if w.reasoning_tokens is not None else np.full(n, np.nan)
    known = ~np.isnan(reasoning)
    r = np.where(known, reasoning, 0.0)
    rec = np.minimum(np.maximum(r, 0), w.output_tokens).astype(np.int64)
    if not cfg.enabled:
        cut = np.zeros(n, dtype=np.int64)
    else:
        assert cfg.budget_tokens is not None
        cut = cut_tokens(w.output_tokens, reasoning, cfg.budget_tokens)
    removed = 0
    out = w
    if cut.any():
        changes: dict[str, Any] = {"output_tokens": w.output_tokens - cut}
        if cfg.reasoning_in_context:
            # cumulative cuts of the earlier turns of the same program
            prog = np.repeat(np.arange(w.n_programs), np.diff(w.turn_start))
            total = np.cumsum(cut)
            before = total - cut  # cuts of all earlier turns (any program)
            first = w.turn_start[:-1][prog]
            base = np.where(first > 0, total[np.maximum(first - 1, 0)], 0)
            shift = before - base
            shift[first == np.arange(n)] = 0
            changes["input_tokens"] = np.maximum(w.input_tokens - shift, 1)
            changes["reused_tokens"] = np.maximum(w.reused_tokens - shift, 0)
            smallest = np.minimum.reduceat(changes["input_tokens"], w.turn_start[:-1])
            changes["prefix_tokens"] = np.minimum(w.prefix_tokens, smallest)  # (Workload: capped at the smallest)
            removed = int((w.input_tokens - changes["input_tokens"]).sum())
        out = dataclasses.replace(w, **changes)
    stats = ThinkingStats(
        turns=n,
        turns_with_reasoning=int((rec > 0).sum()),
        turns_unrecorded=int((~known).sum()),
        turns_capped=int((cut > 0).sum()),
        reasoning_tokens=int(rec.sum()),
        cut_tokens=int(cut.sum()),
        input_tokens_removed=removed,
    )
    return out, stats
