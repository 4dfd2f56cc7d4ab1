"""Front-end admission: requests longer than ``max_model_len`` are rejected, as vLLM's server rejects them.

vLLM 0.32 validates every request before it reaches the engine core
(``vllm/v1/engine/input_processor.py::InputProcessor._validate_prompt_len``): a decoder prompt with
``prompt_len > max_model_len`` is refused ("The decoder prompt (length N) is longer than the maximum model
length of M"), and for a generating model so is ``prompt_len == max_model_len`` (no room for one output token).
The client gets an error (HTTP 400); the engine never schedules the request, the others run. A request that is
admitted stops when its sequence reaches ``max_model_len`` tokens (``vllm/v1/core/sched/utils.py::check_stop``:
``request.num_tokens >= max_model_len`` -> ``FINISHED_LENGTH_CAPPED``), so its output is capped at
``max_model_len - prompt`` tokens.

Here the rejection is applied to the compiled workload before the run (a rejected request costs the engine
nothing, so removing it is exact): a single-turn program whose request is rejected is removed; an agent
program is cut at its first rejected call (the agent cannot continue without the answer), the calls before it
run. Every rejection and cap is counted and reported in the summary (``rejected``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentreplay.sim.workload import Workload


@dataclass(frozen=True, slots=True)
class Rejections:
    """What ``max_model_len`` did to a workload (all counts; ids of the first few rejected requests)."""

    max_model_len: int | None
    rejected_requests: int = 0
    rejected_prompt_tokens: int = 0
    programs_removed: int = 0  #: programs whose first call was rejected (nothing of them runs)
    programs_cut: int = 0  #: programs that ran up to a rejected later call
    calls_not_run: int = 0  #: later calls of cut programs (never sent: the agent stopped at the rejection)
    length_capped: int = 0  #: admitted requests whose output was cut at max_model_len
    output_tokens_cut: int = 0
    examples: list[str] = field(default_factory=list)  #: "program_id turn N: P prompt tokens", at most 5

    def summary(self) -> dict[str, object]:
        return {
            "max_model_len": self.max_model_len,
            "rejected_requests": self.rejected_requests,
            "rejected_prompt_tokens": self.rejected_prompt_tokens,
            "programs_removed": self.programs_removed,
            "programs_cut": self.programs_cut,
            "calls_not_run": self.calls_not_run,
            "length_capped_requests": self.length_capped,
            "output_tokens_cut": self.output_tokens_cut,
            "examples": list(self.examples),
            "rule": "vLLM InputProcessor._validate_prompt_len: prompt >= max_model_len rejected; "
            "check_stop caps output at max_model_len - prompt",
        }


def apply_max_model_len(w: Workload, max_model_len: int | None) -> tuple[Workload, Rejections]:
    """The workload vLLM would run with ``max_model_len``, and what was rejected or capped.

    Unchanged (the same object) when nothing is over the limit or the limit is None."""
    if max_model_len is None:
        return w, Rejections(None)
    if max_model_len < 1:
        raise ValueError(f"max_model_len = {max_model_len} is invalid: >= 1")
    rejected = w.input_tokens >= max_model_len
    room = max_model_len - w.input_tokens
    capped = ~rejected & (w.output_tokens > room)
    if not rejected.any() and not capped.any():
        return w, Rejections(max_model_len)
    starts = w.turn_start
    keep_prog: list[int] = []
    keep_turns: list[np.ndarray] = []
    removed = cut = not_run = 0
    examples: list[str] = []
    n_rejected = 0
    rejected_tokens = 0
    for p in range(w.n_programs):
        a, b = int(starts[p]), int(starts[p + 1])
        bad = np.flatnonzero(rejected[a:b])
        if len(bad) == 0:
            keep_prog.append(p)
            keep_turns.append(np.arange(a, b))
            continue
        first = int(bad[0])
        n_rejected += 1
        rejected_tokens += int(w.input_tokens[a + first])
        not_run += b - a - first - 1
        if len(examples) < 5:
            examples.append(f"{w.program_ids[p]} turn {first}: {int(w.input_tokens[a + first]):,} prompt tokens")
        if first == 0:
            removed += 1
        else:
            cut += 1
            keep_prog.append(p)
            keep_turns.append(np.arange(a, a + first))
    if not keep_prog:
        raise ValueError(
            f"max_model_len = {max_model_len}: every program's first request is rejected "
            f"(prompt >= max_model_len); nothing to simulate"
        )
    idx = np.concatenate(keep_turns)
    counts = np.array([len(t) for t in keep_turns], dtype=np.int64)
    start = np.zeros(len(keep_prog) + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    out = np.minimum(w.output_tokens[idx], np.maximum(room[idx], 1))
    cap_mask = capped[idx]
    kept = w.select(keep_prog, idx, start, out)
    return kept, Rejections(
        max_model_len,
        n_rejected,
        rejected_tokens,
        removed,
        cut,
        not_run,
        int(cap_mask.sum()),
        int((w.output_tokens[idx] - out).sum()),
        examples,
    )
