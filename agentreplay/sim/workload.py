"""A trace compiled into flat arrays the simulator indexes by integer (no DataFrame access on the hot path).

Programs keep the trace's row order; turns are sorted by (program, turn_idx) and addressed as
``turn_start[p] + t``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentreplay.sim.dag import Dag, build_dag
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
    dag: Dag | None = None  #: fan-out links (:mod:`.dag`); None for a workload of independent programs
    #: float64 [n_turns]: the trace's reasoning tokens per turn (part of output_tokens), NaN where not recorded;
    #: None when unknown altogether (read by the thinking budget, agentreplay.features.thinking)
    reasoning_tokens: np.ndarray | None = None

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

    def trace_turns(self) -> dict[str, np.ndarray]:
        """``program_id``, ``turn_idx`` and ``reused_tokens`` of every turn, as the trace gives them."""
        prog = np.repeat(np.arange(self.n_programs), np.diff(self.turn_start))
        return {
            "program_id": np.asarray(self.program_ids, dtype=object)[prog],
            "turn_idx": np.arange(self.n_turns) - self.turn_start[prog],
            "reused_tokens": self.reused_tokens,
        }

    def head(self, n: int) -> Workload:
        """The first ``n`` programs."""
        if n >= self.n_programs:
            return self
        end = int(self.turn_start[n])
        return Workload(
            self.program_ids[:n],
            self.task_ids[:n],
            self.turn_start[: n + 1].copy(),
            self.input_tokens[:end],
            self.output_tokens[:end],
            self.reused_tokens[:end],
            self.tool_s[:end],
            self.tool_class[:end],
            self.arrival_s[:n],
            self.prefix_ids[:n],
            self.prefix_tokens[:n],
            None if self.chains is None else self.chains[:end],
            self.seg_bounds,
            None if self.dag is None else self.dag.restrict(list(range(n)), self.turn_start, self.turn_start[: n + 1]),
            None if self.reasoning_tokens is None else self.reasoning_tokens[:end],
        )

    def select(
        self, programs: list[int], turns: np.ndarray, turn_start: np.ndarray, output_tokens: np.ndarray
    ) -> Workload:
        """A sub-workload: ``programs`` (indices, in order), their ``turns`` (global indices, grouped by program
        as ``turn_start`` says) with ``output_tokens`` replacing theirs. The last kept turn's tool gap is
        dropped (the program ends there)."""
        tool_s = self.tool_s[turns].copy()
        tool_s[turn_start[1:] - 1] = np.nan
        ids = turns.tolist()
        return Workload(
            [self.program_ids[p] for p in programs],
            [self.task_ids[p] for p in programs],
            turn_start,
            self.input_tokens[turns],
            output_tokens,
            self.reused_tokens[turns],
            tool_s,
            [self.tool_class[t] for t in ids],
            self.arrival_s[programs],
            [self.prefix_ids[p] for p in programs],
            self.prefix_tokens[programs],
            None if self.chains is None else [self.chains[t] for t in ids],
            self.seg_bounds,
            None if self.dag is None else self.dag.restrict(programs, self.turn_start, turn_start),
            None if self.reasoning_tokens is None else self.reasoning_tokens[turns],
        )


def compile_trace(trace: Trace) -> Workload:
    """Flatten a validated trace (:func:`compile_columns` on its frames' columns)."""

    def col(df: Any, name: str, kind: str) -> np.ndarray:
        if name not in df.columns:  # optional (prefix_hash_ids, hash_block_tokens)
            return np.full(len(df), None, dtype=object)
        if kind == "i":
            return df[name].to_numpy(dtype=np.int64)
        if kind == "f":
            return df[name].to_numpy(dtype=np.float64, na_value=np.nan)
        return np.asarray([*df[name].tolist(), None], dtype=object)[:-1]  # (a list per row stays one object)

    return compile_columns(
        {c: col(trace.programs, c, k) for c, k in _PROGRAM_COLUMNS.items()},
        {c: col(trace.turns, c, k) for c, k in _TURN_COLUMNS.items()},
    )


def load_workload(trace_dir: str | os.PathLike[str]) -> Workload:
    """Read, validate and compile a canonical trace directory without pandas (:mod:`agentreplay.trace.columns`);
    a trace that check refuses is read with :func:`agentreplay.trace.io.read_trace`, which names the problem (or,
    if it accepts the trace after all, compiled from its frames)."""
    from agentreplay.trace.columns import columns_valid, read_columns

    programs, turns, nulls = read_columns(trace_dir)
    if columns_valid(programs, turns, nulls):
        return compile_columns(programs, turns)
    from agentreplay.trace.io import read_trace

    return compile_trace(read_trace(trace_dir))


#: the columns the simulator uses, and how a frame's column is read: i int64, f float64 (NaN), o objects
_PROGRAM_COLUMNS = {
    "program_id": "o",
    "task_id": "o",
    "shared_prefix_tokens": "i",
    "arrival_s": "f",
    "shared_prefix_id": "o",
    "parent_program_id": "o",
    "parent_turn_idx": "o",
    "spawn_delay_s": "f",
}
_TURN_COLUMNS = {
    "program_id": "o",
    "turn_idx": "i",
    "input_tokens": "i",
    "output_tokens": "i",
    "reused_tokens": "i",
    "tool_duration_s": "f",
    "tool_class": "o",
    "reasoning_tokens": "f",
    "prefix_hash_ids": "o",
    "hash_block_tokens": "f",
}


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def compile_columns(programs: dict[str, np.ndarray], turns: dict[str, np.ndarray]) -> Workload:
    """Flatten a validated trace given as columns (``programs``: program_id, task_id, shared_prefix_tokens,
    arrival_s, shared_prefix_id; ``turns``: program_id, turn_idx, input / output / reused_tokens,
    tool_duration_s, tool_class, prefix_hash_ids, hash_block_tokens; missing values None or NaN). Programs keep
    their order, turns are sorted by (program, turn_idx). Zero-output turns are given one output token (engines
    emit at least one); the number of such turns is visible as ``(trace output == 0).sum()``."""
    from agentreplay.trace.columns import program_index

    pids = programs["program_id"]
    if len(pids) == 0:
        raise TraceError("trace has no programs")
    p = program_index(pids, turns["program_id"])
    if (p < 0).any():
        raise TraceError(f"turn of program {turns['program_id'][int(np.argmax(p < 0))]!r}: no such program")
    order = np.lexsort((turns["turn_idx"], p))
    counts = np.bincount(p, minlength=len(pids))
    if (counts == 0).any():
        raise TraceError(f"program {pids[int(np.argmax(counts == 0))]!r} has no turns")
    start = np.zeros(len(pids) + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    inp = np.asarray(turns["input_tokens"], dtype=np.int64)[order]
    min_input = np.minimum.reduceat(inp, start[:-1])
    prefix = np.minimum(np.asarray(programs["shared_prefix_tokens"], dtype=np.int64), min_input)
    chains, bounds = None, None
    hash_ids = turns["prefix_hash_ids"][order].tolist()
    if any(not _missing(v) for v in hash_ids):
        chains, bounds = build_chains(
            [None if _missing(v) else v for v in hash_ids],
            inp.tolist(),
            [None if _missing(v) else int(v) for v in turns["hash_block_tokens"][order].tolist()],
        )
    dag = None
    if "parent_program_id" in programs:
        dag = build_dag(
            pids.tolist(),
            programs["parent_program_id"].tolist(),
            programs["parent_turn_idx"].tolist(),
            programs["spawn_delay_s"].tolist(),
            start,
            inp,
            prefix,
        )
    return Workload(
        program_ids=pids.tolist(),
        task_ids=programs["task_id"].tolist(),
        turn_start=start,
        input_tokens=inp,
        output_tokens=np.maximum(np.asarray(turns["output_tokens"], dtype=np.int64)[order], 1),
        reused_tokens=np.asarray(turns["reused_tokens"], dtype=np.int64)[order],
        tool_s=_floats(turns["tool_duration_s"])[order],
        tool_class=turns["tool_class"][order].tolist(),
        arrival_s=_floats(programs["arrival_s"]),
        prefix_ids=[None if _missing(v) else str(v) for v in programs["shared_prefix_id"].tolist()],
        prefix_tokens=prefix,
        chains=chains,
        seg_bounds=bounds,
        dag=dag,
        reasoning_tokens=_floats(turns["reasoning_tokens"])[order] if "reasoning_tokens" in turns else None,
    )


def _floats(x: np.ndarray) -> np.ndarray:
    """float64, NaN where missing (an object column may hold None)."""
    if x.dtype == object:
        return np.array([np.nan if _missing(v) else float(v) for v in x.tolist()], dtype=np.float64)
    return np.asarray(x, dtype=np.float64)
