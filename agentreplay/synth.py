"""Synthetic agent programs that follow a real trace's statistics (``agentreplay synth``).

Method ("position-matched donor resampling", chosen for simplicity):

1. **Turn count**: each synthetic program copies the turn count, agent, model, task id and shared prefix of a
   *template* program drawn uniformly from the source, so turn counts follow the empirical distribution.
2. **Turns**: turn ``t`` of an ``n``-turn program sits at relative position ``r = t / (n - 1)``
   (``r = 0`` when ``n = 1``). Its ``(new_input_tokens, output_tokens, tool_class, tool_name, tool_duration)``
   are taken *jointly* from one turn of a *donor* program, drawn independently per turn among the programs of
   similar length (turn-count rank within +-``neighbourhood`` x the number of programs of the template's, 5 %
   by default: per-turn observation sizes depend on program length), at the donor's nearest position
   ``round(r * (n_donor - 1))``. So the first turn always comes from a first turn (the full task prompt), the
   last from a last turn (no tool after it), and the per-turn joint distribution at each phase of a program
   (exploration early, tests late) follows the source. Correlation *across* the turns of one program beyond
   what its length explains (e.g. a verbose agent stays verbose) is not preserved.
3. **Jitter**: token counts are multiplied by ``exp(N(0, jitter^2))`` (default 0.1, about +-10 %) and rounded,
   so synthetic turns are not exact copies.
4. **Contexts are append-only**: ``input_0 = max(new_0, shared_prefix_tokens)``, and
   ``input_t = input_{t-1} + output_{t-1} + new_t`` with ``reused_tokens = input_{t-1} + output_{t-1}``, where a
   source turn's new tokens are ``input_tokens - reused_tokens`` (its prompt minus the part extending the
   previous context).
5. **Tool durations** (seconds, every turn but the last, ``tool_duration_kind = "sampled"``): drawn from the
   tool model for the turn's class when one is given, else the donor turn's own duration (joint with its
   tokens and class); a donor turn without one gets a duration resampled from the source's durations of the
   same class (or of any class if that class has none).

Everything is drawn from one ``numpy.random.Generator`` seeded with ``seed``: same source + seed = same trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from agentreplay.sim.tools_generative import ToolSampler
from agentreplay.trace.io import Trace, TraceError
from agentreplay.trace.schema import DAG_COLUMNS, PROGRAMS, TURNS

SOURCE = "synthetic"


def _ordered_turns(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Programs (with at least one turn), their turns sorted by (program, turn_idx), and turn offsets."""
    progs = trace.programs.reset_index(drop=True)
    order = {pid: i for i, pid in enumerate(progs["program_id"])}
    t = trace.turns.assign(_p=trace.turns["program_id"].map(order))
    t = t.sort_values(["_p", "turn_idx"], kind="stable").reset_index(drop=True)
    counts = t.groupby("_p").size().reindex(range(len(progs)), fill_value=0).to_numpy()
    keep = counts > 0
    if not keep.any():
        raise TraceError("source trace has no turns")
    progs = progs[keep].reset_index(drop=True)
    start = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(counts[keep], out=start[1:])
    return progs, t, start


@dataclass(frozen=True)
class Source:
    """A source trace as the arrays the generator draws from (programs with at least one turn, their turns sorted
    by (program, turn_idx); ``start``: turn offsets)."""

    progs: pd.DataFrame
    turns: pd.DataFrame
    start: np.ndarray
    n_turns: np.ndarray  #: int64 per program
    new_tokens: np.ndarray  #: int64 per turn: input_tokens - reused_tokens
    output_tokens: np.ndarray  #: int64 per turn
    tool_class: np.ndarray  #: object per turn
    tool_duration_s: np.ndarray  #: float64 per turn, NaN where missing
    prefix_tokens: np.ndarray  #: int64 per program: shared_prefix_tokens

    @classmethod
    def of(cls, trace: Trace) -> Source:
        progs, src, start = _ordered_turns(trace)
        inp = src["input_tokens"].to_numpy(np.int64)
        return cls(
            progs,
            src,
            start,
            np.diff(start),
            inp - src["reused_tokens"].to_numpy(np.int64),
            src["output_tokens"].to_numpy(np.int64),
            src["tool_class"].to_numpy(object),
            src["tool_duration_s"].to_numpy(np.float64, na_value=np.nan),
            progs["shared_prefix_tokens"].to_numpy(np.int64),
        )


@dataclass(frozen=True)
class Drawn:
    """The arrays of ``n`` synthetic programs (see the module docstring): per program ``template`` (source
    program index) and ``n_turns``; per turn (grouped by program, in turn order) ``row`` (donor turn),
    ``input_tokens``, ``output_tokens``, ``reused_tokens``, ``tool_class``, ``tool_duration_s`` (NaN on last
    turns), ``t_idx`` and ``last``."""

    template: np.ndarray
    n_turns: np.ndarray
    offsets: np.ndarray
    prog_of: np.ndarray
    t_idx: np.ndarray
    last: np.ndarray
    row: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    reused_tokens: np.ndarray
    prefix_tokens: np.ndarray
    tool_class: np.ndarray
    tool_duration_s: np.ndarray


def draw(
    source: Source,
    n_programs: int,
    rng: np.random.Generator,
    *,
    tool_sampler: ToolSampler | None = None,
    jitter: float = 0.1,
    neighbourhood: float = 0.05,
) -> Drawn:
    """Draw ``n_programs`` synthetic programs from ``rng`` (steps 1-5 of the module docstring); the draws, in
    order: templates, donors, input jitter, output jitter, tool durations."""
    n_src, start = source.n_turns, source.start
    n_progs_src = len(n_src)
    template = rng.integers(0, n_progs_src, n_programs)
    n_turns = n_src[template]
    total = int(n_turns.sum())
    offs = np.zeros(n_programs + 1, dtype=np.int64)
    np.cumsum(n_turns, out=offs[1:])
    prog_of = np.repeat(np.arange(n_programs), n_turns)
    t_idx = np.arange(total) - offs[prog_of]
    n_of = n_turns[prog_of]
    r = np.where(n_of > 1, t_idx / np.maximum(n_of - 1, 1), 0.0)
    # Donors: programs whose turn-count rank is within +-neighbourhood of the template's (see step 2).
    by_len = np.argsort(n_src, kind="stable")
    rank = np.empty(n_progs_src, dtype=np.int64)
    rank[by_len] = np.arange(n_progs_src)
    h = max(1, round(neighbourhood * n_progs_src))
    lo = np.clip(rank[template] - h, 0, n_progs_src - 1)[prog_of]
    hi = np.clip(rank[template] + h, 0, n_progs_src - 1)[prog_of]
    donor = by_len[lo + np.floor(rng.random(total) * (hi - lo + 1)).astype(np.int64)]
    del lo, hi
    row = start[donor] + np.rint(r * (n_src[donor] - 1)).astype(np.int64)
    del donor, r

    def jittered(v: np.ndarray) -> np.ndarray:
        f = np.exp(jitter * rng.standard_normal(len(v))) if jitter else 1.0
        return np.rint(v * f).astype(np.int64)

    new = jittered(source.new_tokens[row])
    out = jittered(source.output_tokens[row])
    prefix = source.prefix_tokens[template]
    first = t_idx == 0
    new[first] = np.maximum(new[first], prefix[prog_of[first]])
    # input_t = sum of new_s (s <= t) + sum of output_s (s < t), within the program.
    grow = new + np.where(first, 0, np.roll(out, 1))
    csum = np.cumsum(grow)
    input_tokens = csum - (csum[offs[:-1]] - grow[offs[:-1]])[prog_of]
    del csum
    reused = np.where(first, 0, input_tokens - new)

    last = t_idx == n_of - 1
    tool_class = source.tool_class[row]
    duration = _durations(source, row, tool_class, last, rng, tool_sampler)
    return Drawn(
        template, n_turns, offs, prog_of, t_idx, last, row, input_tokens, out, reused, prefix, tool_class, duration
    )


def synthesize(
    trace: Trace,
    n_programs: int,
    *,
    seed: int = 0,
    tool_sampler: ToolSampler | None = None,
    jitter: float = 0.1,
    neighbourhood: float = 0.05,
) -> Trace:
    """``n_programs`` synthetic programs following ``trace`` (see the module docstring); a valid Trace with
    ``source = "synthetic"``."""
    check(n_programs, jitter, neighbourhood)
    rng = np.random.default_rng(seed)
    source = Source.of(trace)
    progs, src = source.progs, source.turns
    d = draw(source, n_programs, rng, tool_sampler=tool_sampler, jitter=jitter, neighbourhood=neighbourhood)
    template, n_turns, prog_of, t_idx, last, row = d.template, d.n_turns, d.prog_of, d.t_idx, d.last, d.row
    total = len(row)

    pids = np.array([f"{SOURCE}/{i:06d}" for i in range(n_programs)], dtype=object)
    tp = progs.iloc[template].reset_index(drop=True)
    programs = pd.DataFrame(
        {
            "program_id": pids,
            "source": SOURCE,
            "task_id": tp["task_id"],
            "agent": tp["agent"],
            "model": tp["model"],
            "n_turns": n_turns.astype(np.int32),
            "resolved": pd.array([None] * n_programs, dtype="boolean"),
            "arrival_s": np.full(n_programs, np.nan),
            "shared_prefix_id": tp["shared_prefix_id"],
            "shared_prefix_tokens": d.prefix_tokens,
        }
    )
    kind = np.full(total, "sampled", dtype=object)
    kind[last] = None
    none_f = np.full(total, np.nan)
    none_i = pd.array([None] * total, dtype="Int64")
    turns = pd.DataFrame(
        {
            "program_id": pids[prog_of],
            "turn_idx": t_idx.astype(np.int32),
            "input_tokens": d.input_tokens,
            "output_tokens": d.output_tokens,
            "reused_tokens": d.reused_tokens,
            "provider_cached_tokens": none_i,
            "reasoning_tokens": none_i,
            "tokens_kind": src["tokens_kind"].to_numpy(object)[row],
            "tool_class": d.tool_class,
            "tool_name": src["tool_name"].to_numpy(object)[row],
            "tool_duration_s": d.tool_duration_s,
            "tool_duration_kind": kind,
            "llm_latency_s": none_f,
            "t_request_s": none_f,
            "t_response_s": none_f,
        }
    )
    programs = programs.assign(**{c: None for c in DAG_COLUMNS})  # independent programs: no fan-out links
    return Trace(programs[[f.name for f in PROGRAMS]], turns.reindex(columns=[f.name for f in TURNS]))


def check(n_programs: int, jitter: float, neighbourhood: float) -> None:
    """The generator's arguments, checked (ValueError naming the argument and value)."""
    if n_programs < 1:
        raise ValueError(f"n_programs must be >= 1, got {n_programs}")
    if jitter < 0:
        raise ValueError(f"jitter must be >= 0, got {jitter}")
    if not 0 <= neighbourhood <= 1:
        raise ValueError(f"neighbourhood must be in [0, 1], got {neighbourhood}")


def _durations(
    source: Source,
    row: np.ndarray,
    tool_class: np.ndarray,
    last: np.ndarray,
    rng: np.random.Generator,
    sampler: ToolSampler | None,
) -> np.ndarray:
    """Tool seconds per synthetic turn (NaN on last turns): from the tool model, else the donor's."""
    out = np.full(len(row), np.nan)
    need = ~last
    if sampler is not None:
        for c in sorted(set(tool_class[need].tolist())):
            m = need & (tool_class == c)
            out[m] = sampler.sample(c, rng, int(m.sum()))
        return out
    src_d = source.tool_duration_s
    out[need] = src_d[row[need]]
    missing = need & np.isnan(out)
    if missing.any():
        pool_all = src_d[~np.isnan(src_d)]
        if len(pool_all) == 0:
            raise TraceError("source trace has no tool durations to resample; give a tool model")
        src_cls = source.tool_class
        for c in sorted(set(tool_class[missing].tolist())):
            m = missing & (tool_class == c)
            pool = src_d[(src_cls == c) & ~np.isnan(src_d)]
            pool = pool if len(pool) else pool_all
            out[m] = pool[rng.integers(0, len(pool), int(m.sum()))]
    return out
