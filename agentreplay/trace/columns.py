"""A canonical trace read as NumPy columns, without pandas: the reader of ``agentreplay simulate``.

Importing pandas costs about 0.3 s, most of a small run's wall time, and the simulator needs
only flat arrays (:func:`agentreplay.sim.workload.compile_columns`). The tables are opened by the same
:func:`agentreplay.trace.io.open_table` (schema version and column types checked); :func:`columns_valid` then
checks every invariant :func:`agentreplay.trace.io.validate` checks, on the arrays, and answers only yes or no. On
no, the caller reads the trace with :func:`agentreplay.trace.io.read_trace`, whose ``validate`` names the file,
field, program and turn (one source for the error messages). ``columns_valid`` must therefore never accept what
``validate`` rejects; rejecting more only costs the slow path (``tests/trace/test_columns.py`` checks both).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from agentreplay.trace.io import TraceError, open_table
from agentreplay.trace.schema import OPTIONAL_COLUMNS, REQUIRED_TABLES, SCHEMAS, TOKENS_KINDS, TOOL_DURATION_KINDS
from agentreplay.trace.taxonomy import TOOL_CLASSES

Columns = dict[str, np.ndarray]


#: the columns the simulator and :func:`columns_valid` read (the others are checked for nulls only)
USED = {
    "programs": (
        "program_id",
        "task_id",
        "n_turns",
        "shared_prefix_tokens",
        "arrival_s",
        "shared_prefix_id",
        "parent_program_id",
        "parent_turn_idx",
        "spawn_delay_s",
    ),
    "turns": (
        "program_id",
        "turn_idx",
        "input_tokens",
        "output_tokens",
        "reused_tokens",
        "provider_cached_tokens",
        "reasoning_tokens",
        "tokens_kind",
        "tool_class",
        "tool_duration_s",
        "tool_duration_kind",
        "llm_latency_s",
        "prefix_hash_ids",
        "hash_block_tokens",
    ),
}
_NUMBERS = {pa.int32(): np.int32, pa.int64(): np.int64, pa.float64(): np.float64}


def _chunk(arr: pa.Array) -> np.ndarray:
    """One Arrow chunk as NumPy, read from its buffers: ``to_numpy`` would import pandas (pyarrow's C++
    conversion looks up pandas' NaT and friends). Integers with nulls become float64 with NaN, as ``to_numpy``
    gives them; strings and lists object arrays with None where null."""
    n, off, bufs = len(arr), arr.offset, arr.buffers()
    valid = None
    if arr.null_count:
        valid = np.unpackbits(np.frombuffer(bufs[0], np.uint8), bitorder="little")[off : off + n].astype(bool)
    typ = arr.type
    if typ in _NUMBERS:
        x = np.frombuffer(bufs[1], _NUMBERS[typ])[off : off + n]
        if valid is not None:
            x = x.astype(np.float64)
            x[~valid] = np.nan
        return x
    if typ in (pa.string(), pa.large_string()):
        o = np.frombuffer(bufs[1], np.int32 if typ == pa.string() else np.int64)[off : off + n + 1].tolist()
        data = bytes(bufs[2]) if bufs[2] is not None else b""
        out = np.empty(n, dtype=object)
        out[:] = [data[a:b].decode() for a, b in itertools.pairwise(o)]
    elif typ == pa.list_(pa.int64()):
        o = np.frombuffer(bufs[1], np.int32)[off : off + n + 1]
        values = _chunk(arr.values)
        out = np.empty(n, dtype=object)
        out[:] = [values[a:b] for a, b in zip(o[:-1].tolist(), o[1:].tolist(), strict=True)]
    else:
        raise TypeError(f"no NumPy reader for {typ}")
    if valid is not None:
        out[~valid] = None
    return out


def _column(table: pa.Table, name: str) -> np.ndarray:
    """One column as NumPy (:func:`_chunk`); an absent optional column as all None."""
    if name not in table.column_names:
        return np.full(table.num_rows, None, dtype=object)
    chunks = [_chunk(c) for c in table.column(name).chunks]
    if not chunks:
        return (
            np.full(0, None, dtype=object)
            if table.schema.field(name).type not in _NUMBERS
            else np.zeros(0, dtype=_NUMBERS[table.schema.field(name).type])
        )
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def read_columns(trace_dir: str | os.PathLike[str]) -> tuple[Columns, Columns, dict[str, int]]:
    """``programs`` and ``turns`` columns of a trace directory, and each column's null count (``-1``: absent).

    Raises :class:`TraceError` as :func:`agentreplay.trace.io.read_trace` does for a missing directory or table
    and for a table that is not canonical Parquet; the values are not validated here (:func:`columns_valid`)."""
    d = Path(trace_dir)
    if not d.is_dir():
        raise TraceError(f"{d}: not a directory")
    out: list[Columns] = []
    nulls: dict[str, int] = {}
    for name in REQUIRED_TABLES:
        p = d / f"{name}.parquet"
        if not p.exists():
            raise TraceError(f"{d}: {name}.parquet missing")
        table = open_table(p, name)
        out.append({col: _column(table, col) for col in USED[name]})
        for f in SCHEMAS[name]:
            nulls[f"{name}.{f.name}"] = table.column(f.name).null_count if f.name in table.column_names else -1
    return out[0], out[1], nulls


def program_index(program_ids: np.ndarray, turn_program_ids: np.ndarray) -> np.ndarray:
    """Each turn's program as a row index into ``program_ids`` (-1: no such program)."""
    index = {pid: i for i, pid in enumerate(program_ids.tolist())}
    return np.fromiter(
        (index.get(pid, -1) for pid in turn_program_ids.tolist()), dtype=np.int64, count=len(turn_program_ids)
    )


def columns_valid(programs: Columns, turns: Columns, nulls: dict[str, int]) -> bool:
    """True when :func:`agentreplay.trace.io.validate` would accept the trace (see the module docstring)."""
    for key, n in nulls.items():
        table, col = key.split(".", 1)
        field = SCHEMAS[table].field(col)
        if n == -1 and col not in OPTIONAL_COLUMNS[table]:
            return False  # (open_table already refused a missing required column)
        if n > 0 and not field.nullable:
            return False
    pids = programs["program_id"]
    if len(set(pids.tolist())) != len(pids):
        return False
    p = program_index(pids, turns["program_id"])
    if (p < 0).any():
        return False
    with np.errstate(invalid="ignore"):
        for col in (
            "input_tokens",
            "output_tokens",
            "reused_tokens",
            "provider_cached_tokens",
            "reasoning_tokens",
            "tool_duration_s",
            "llm_latency_s",
        ):
            x = turns[col]
            if x.dtype == object or (x < 0).any():  # object: an all-null numeric column; let validate judge it
                return False
        if (turns["reused_tokens"] > turns["input_tokens"]).any() or (programs["shared_prefix_tokens"] < 0).any():
            return False
    for col, vocab in (
        ("tool_class", TOOL_CLASSES),
        ("tokens_kind", TOKENS_KINDS),
        ("tool_duration_kind", TOOL_DURATION_KINDS),
    ):
        if not set(turns[col].tolist()) <= {*vocab, None}:
            return False
    idx = turns["turn_idx"].astype(np.int64)
    counts = np.bincount(p, minlength=len(pids))
    if (counts != programs["n_turns"]).any():
        return False
    order = np.lexsort((idx, p))
    start = np.concatenate(([0], np.cumsum(counts)))
    if (idx[order] != np.arange(len(idx)) - start[p[order]]).any():
        return False
    if not _hash_ids_valid(turns):
        return False
    parents = programs["parent_program_id"]
    return not any(v is not None for v in parents.tolist())  # fan-out links: validate() checks them


def _hash_ids_valid(turns: Columns) -> bool:
    ids = turns["prefix_hash_ids"].tolist()
    has = [v is not None for v in ids]
    if not any(has):
        return True
    hbt = turns["hash_block_tokens"].tolist()
    inp = turns["input_tokens"].tolist()
    for v, b, n in zip(ids, hbt, inp, strict=True):
        if v is None:
            continue
        if b is None or b != b or b < 1 or len(v) > -(-int(n) // int(b)):
            return False
    return True
