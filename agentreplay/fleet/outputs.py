"""Read a ``simulate`` output folder for task-level post-processing (nothing here re-runs the simulator).

A folder written by ``agentreplay simulate --out DIR`` holds ``turns.parquet``, ``programs.parquet``,
``instances.parquet``, ``summary.json``, ``config.toml`` and, with ``--decision-log``, ``decisions.jsonl``
(:meth:`agentreplay.sim.run.SimResult.write`). :func:`read_output` loads them and checks the columns the task
metrics read; a missing file or column is an :class:`OutputError` naming the file and what is missing.

The decision log addresses programs by their index in the run's workload (``"program": p``); programs keep the
trace's row order in ``programs.parquet`` (:meth:`agentreplay.sim.metrics.Recorder.programs_frame`), so row ``p``
of ``programs.parquet`` is program ``p`` of the log. :func:`read_output` adds the ``program_id`` column to the
log with that mapping.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agentreplay.sim.config import ConfigError, SimConfig, load

#: Files every simulate output has (``decisions.jsonl`` is optional).
REQUIRED_FILES = ("turns.parquet", "programs.parquet", "summary.json", "config.toml")

#: Columns of ``turns.parquet`` the task metrics read.
TURN_COLUMNS = (
    "program_id",
    "turn_idx",
    "instance",
    "release_s",
    "first_token_s",
    "finish_s",
    "queued_s",
    "ttft_s",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reloaded_dram_tokens",
    "reloaded_cxl_tokens",
    "reloaded_remote_tokens",
    "recomputed_tokens",
    "preemptions",
    "tool_s",
)
#: Columns of ``programs.parquet`` the task metrics read.
PROGRAM_COLUMNS = ("program_id", "arrival_s", "finish_s", "jct_s", "n_turns", "tool_s")


class OutputError(ValueError):
    """The folder is not a (complete) simulate output; the message names the file and what is missing."""


@dataclass(frozen=True, slots=True)
class SimOutput:
    """A simulate output in memory. ``turns`` sorted by (program_id order of ``programs``, turn_idx)."""

    path: Path
    turns: pd.DataFrame
    programs: pd.DataFrame
    summary: dict[str, Any]
    config: SimConfig
    decisions: pd.DataFrame | None  #: one row per logged decision, with ``program_id``; None without the log
    #: the failover ledger (``failover.parquet``, a run with ``[failures]``:
    #: :mod:`agentreplay.features.failover.failover`); None without
    failover: pd.DataFrame | None = None

    @property
    def has_decisions(self) -> bool:
        return self.decisions is not None


def _check_columns(df: pd.DataFrame, need: tuple[str, ...], file: Path) -> None:
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise OutputError(
            f"{file}: missing column(s) {missing}; is this a simulate output (agentreplay simulate --out DIR)?"
        )


def reusable_tokens(turns: pd.DataFrame, reused_tokens: np.ndarray | None = None) -> np.ndarray:
    """Per turn, the prompt tokens extending the previous turn's context (0 on a program's first turn), at most
    the prompt. ``reused_tokens``: the trace's per-turn reuse aligned with ``turns`` (already times the run's
    ``reuse_scale``); None: append-only context, ``min(I_t, I_{t-1} + O_{t-1})``. ``turns`` sorted by program,
    then turn_idx."""
    inp = turns["input_tokens"].to_numpy(np.int64)
    out = turns["output_tokens"].to_numpy(np.int64)
    first = (turns["program_id"] != turns["program_id"].shift()).to_numpy()
    prev_ctx = np.r_[0, (inp + out)[:-1]]
    reuse = np.minimum(inp, prev_ctx) if reused_tokens is None else np.asarray(reused_tokens, dtype=np.int64)
    return np.where(first, 0, np.minimum(reuse, inp))


def read_decisions(path: Path, program_ids: list[str], events: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The decision log as a frame (columns: the union of the records' keys) with ``program_id`` added; only the
    records of ``events`` when given (a line is parsed only if it names one of them: a large run's log holds
    several records per turn)."""
    rows = []
    keys = None if events is None else tuple(f'"event": "{e}"' for e in events)
    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip() or (keys is not None and not any(k in line for k in keys)):
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise OutputError(f"{path}: line {n} is not JSON ({exc.msg})") from None
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["t", "event", "program", "turn", "program_id"])
    for col in ("event", "program", "turn", "t"):
        if col not in df.columns:
            raise OutputError(f"{path}: no record has the field {col!r}")
    prog = df["program"].to_numpy()
    bad = (prog < 0) | (prog >= len(program_ids))
    if bad.any():
        i = int(bad.argmax())
        raise OutputError(
            f"{path}: record {i + 1} has program {int(prog[i])}, outside the "
            f"{len(program_ids)} programs of programs.parquet"
        )
    df["program_id"] = [program_ids[int(p)] for p in prog]
    return df


def read_output(path: str | Path, decision_events: tuple[str, ...] | None = None) -> SimOutput:
    """Load the simulate output folder ``path`` (see the module docstring); ``decision_events``: keep only these
    events of ``decisions.jsonl`` (None: all)."""
    p = Path(path)
    if not p.is_dir():
        raise OutputError(f"{p}: not a folder; give the --out folder of agentreplay simulate")
    for name in REQUIRED_FILES:
        if not (p / name).is_file():
            raise OutputError(
                f"{p}: missing {name}; not a simulate output (agentreplay simulate --out DIR writes "
                f"{', '.join(REQUIRED_FILES)})"
            )
    turns = pd.read_parquet(p / "turns.parquet")
    programs = pd.read_parquet(p / "programs.parquet")
    _check_columns(turns, TURN_COLUMNS, p / "turns.parquet")
    _check_columns(programs, PROGRAM_COLUMNS, p / "programs.parquet")
    try:
        summary = json.loads((p / "summary.json").read_text())
    except json.JSONDecodeError as exc:
        raise OutputError(f"{p / 'summary.json'}: not JSON ({exc.msg})") from None
    try:
        config = load(p / "config.toml")
    except ConfigError as exc:
        raise OutputError(str(exc)) from None
    ids = programs["program_id"].astype(str).tolist()
    unknown = set(turns["program_id"].astype(str)) - set(ids)
    if unknown:
        raise OutputError(f"{p / 'turns.parquet'}: program_id {sorted(unknown)[0]!r} is not in programs.parquet")
    order = {pid: i for i, pid in enumerate(ids)}
    turns = turns.assign(_p=turns["program_id"].map(order)).sort_values(["_p", "turn_idx"], kind="stable")
    turns = turns.drop(columns="_p").reset_index(drop=True)
    dec = p / "decisions.jsonl"
    decisions = read_decisions(dec, ids, decision_events) if dec.is_file() else None
    fo = p / "failover.parquet"
    failover = None
    if fo.is_file():
        failover = pd.read_parquet(fo)
        _check_columns(failover, ("program_id", "turn", "event"), fo)
    return SimOutput(p, turns, programs.reset_index(drop=True), summary, config, decisions, failover)
