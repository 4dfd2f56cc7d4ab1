"""A trace compiled into flat arrays the simulator indexes by integer (no DataFrame access on the hot path).

Programs keep the trace's row order; turns are sorted by (program, turn_idx) and addressed as
``turn_start[p] + t``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from agentreplay.sim.prefix_chain import build_chains
from agentreplay.trace.io import Trace, TraceError


@dataclass(frozen=True, slots=True, eq=False)
class Workload:
    program_ids: list[str]
    task_ids: list[str]
    turn_start: np.ndarray  #: int64 [n_programs + 1] offsets into the turn arrays
    input_tokens: np.ndarray  #: int64 [n_turns]
    output_tokens: np.ndarray  #: int64 [n_turns], at least 1 (an engine always emits one token)
    reused_tokens: np.ndarray  #: int64 [n_turns]
    tool_s: np.ndarray  #: float64 [n_turns]; NaN where the trace has no duration (last turns)
    tool_class: list[str]  #: [n_turns]
    arrival_s: np.ndarray  #: float64 [n_programs]; NaN where unknown
    prefix_ids: list[str | None]  #: shared-prefix id per program
    prefix_tokens: np.ndarray  #: int64 [n_programs], capped at the program's smallest prompt
    #: per turn, the chain of prefix segments its prompt starts with (block-hash traces, :mod:`.prefix_chain`):
    #: segment ids into ``seg_bounds``; None for a turn without hash ids (or a trace without any)
    chains: list[tuple[int, ...] | None] | None = None
    seg_bounds: np.ndarray | None = None  #: int64 [n_segments, 2]: (start, end) token of each chain segment

    @property
    def n_programs(self) -> int:
        return len(self.program_ids)

    @property
    def n_turns(self) -> int:
        return len(self.input_tokens)

    def n_turns_of(self, p: int) -> int:
        return int(self.turn_start[p + 1] - self.turn_start[p])

    def with_reuse_scale(self, k: float) -> Workload:
        """Counterfactual prefix reuse: every turn's ``reused_tokens`` times ``k`` (rounded down)."""
        if k == 1.0:
            return self
        return dataclasses.replace(self, reused_tokens=(self.reused_tokens * k).astype(np.int64))

    @property
    def single_turn(self) -> bool:
        """Every program is one request (a request-level trace): summaries speak of requests."""
        return bool(self.n_programs) and self.n_turns == self.n_programs

    def head(self, n: int) -> Workload:
        """The first ``n`` programs."""
        if n >= self.n_programs:
            return self
        end = int(self.turn_start[n])
        return Workload(self.program_ids[:n], self.task_ids[:n], self.turn_start[: n + 1].copy(),
                        self.input_tokens[:end], self.output_tokens[:end], self.reused_tokens[:end],
                        self.tool_s[:end], self.tool_class[:end], self.arrival_s[:n], self.prefix_ids[:n],
                        self.prefix_tokens[:n], None if self.chains is None else self.chains[:end],
                        self.seg_bounds)

    def select(self, programs: list[int], turns: np.ndarray, turn_start: np.ndarray,
               output_tokens: np.ndarray) -> Workload:
        """A sub-workload: ``programs`` (indices, in order), their ``turns`` (global indices, grouped by program
        as ``turn_start`` says) with ``output_tokens`` replacing theirs. The last kept turn's tool gap is
        dropped (the program ends there)."""
        tool_s = self.tool_s[turns].copy()
        tool_s[turn_start[1:] - 1] = np.nan
        ids = turns.tolist()
        return Workload([self.program_ids[p] for p in programs], [self.task_ids[p] for p in programs],
                        turn_start, self.input_tokens[turns], output_tokens, self.reused_tokens[turns], tool_s,
                        [self.tool_class[t] for t in ids], self.arrival_s[programs],
                        [self.prefix_ids[p] for p in programs], self.prefix_tokens[programs],
                        None if self.chains is None else [self.chains[t] for t in ids], self.seg_bounds)


def compile_trace(trace: Trace) -> Workload:
    """Flatten a validated trace. Zero-output turns are given one output token (engines emit at least one);
    the number of such turns is visible as ``(trace output == 0).sum()``."""
    progs = trace.programs.reset_index(drop=True)
    turns = trace.turns
    if len(progs) == 0:
        raise TraceError("trace has no programs")
    order = {pid: i for i, pid in enumerate(progs["program_id"])}
    t = turns.assign(_p=turns["program_id"].map(order)).sort_values(["_p", "turn_idx"], kind="stable")
    counts = t.groupby("_p").size().reindex(range(len(progs)), fill_value=0).to_numpy()
    if (counts == 0).any():
        raise TraceError(f"program {progs['program_id'].iloc[int(np.argmax(counts == 0))]!r} has no turns")
    start = np.zeros(len(progs) + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    inp = t["input_tokens"].to_numpy(dtype=np.int64)
    min_input = np.minimum.reduceat(inp, start[:-1])
    prefix = np.minimum(progs["shared_prefix_tokens"].to_numpy(dtype=np.int64), min_input)
    chains, bounds = None, None
    if "prefix_hash_ids" in t.columns and t["prefix_hash_ids"].notna().any():
        chains, bounds = build_chains([None if v is None or (isinstance(v, float) and np.isnan(v)) else v
                                       for v in t["prefix_hash_ids"].tolist()], inp.tolist(),
                                      [None if pd.isna(v) else int(v) for v in t["hash_block_tokens"].tolist()])
    return Workload(
        program_ids=progs["program_id"].tolist(),
        task_ids=progs["task_id"].tolist(),
        turn_start=start,
        input_tokens=inp,
        output_tokens=np.maximum(t["output_tokens"].to_numpy(dtype=np.int64), 1),
        reused_tokens=t["reused_tokens"].to_numpy(dtype=np.int64),
        tool_s=t["tool_duration_s"].to_numpy(dtype=np.float64, na_value=np.nan),
        tool_class=t["tool_class"].tolist(),
        arrival_s=progs["arrival_s"].to_numpy(dtype=np.float64, na_value=np.nan),
        prefix_ids=[None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
                    for v in progs["shared_prefix_id"].tolist()],
        prefix_tokens=prefix,
        chains=chains,
        seg_bounds=bounds,
    )
