"""Reading and writing canonical trace directories.

Writers are atomic: each table is written to a temporary file in the destination directory and renamed into
place, and a multi-table write renames only after every table was written, so a failed collect never leaves a
half-written trace behind. Readers validate everything the simulator relies on and name the offending
file, program and turn.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from agentreplay.trace.schema import (
    OPTIONAL_COLUMNS,
    READABLE_VERSIONS,
    REQUIRED_TABLES,
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    SCHEMAS,
    TABLE_KEY,
    TOKENS_KINDS,
    TOOL_DURATION_KINDS,
)
from agentreplay.trace.taxonomy import TOOL_CLASSES

if TYPE_CHECKING:  # pandas is imported where a function needs it: `simulate` reads traces without it
    import pandas as pd


class TraceError(ValueError):
    """A trace file violates the canonical schema; the message names file, field, program and turn."""


@dataclass(frozen=True, slots=True)
class Trace:
    """A canonical trace in memory: ``programs`` and ``turns`` (and optional ``tool_calls``) DataFrames."""

    programs: pd.DataFrame
    turns: pd.DataFrame
    tool_calls: pd.DataFrame | None = None


def to_table(name: str, df: pd.DataFrame) -> pa.Table:
    """Convert a DataFrame to the canonical Arrow table ``name``, with schema metadata; columns in order."""
    import pandas as pd

    schema = SCHEMAS[name]
    # optional columns: absent or all-null (NaN from a frame built without them) -> None
    df = df.assign(
        **{
            c: pd.Series([None] * len(df), index=df.index, dtype=object)
            for c in OPTIONAL_COLUMNS.get(name, ())
            if c not in df.columns or not df[c].notna().any()
        }
    )
    missing = [f.name for f in schema if f.name not in df.columns]
    if missing:
        raise TraceError(f"table {name!r}: missing columns {missing}")
    table = pa.Table.from_pandas(df[[f.name for f in schema]], schema=schema, preserve_index=False)
    meta = {SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode(), TABLE_KEY: name.encode()}
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})


def write_trace(out_dir: str | os.PathLike[str], trace: Trace) -> dict[str, Path]:
    """Validate and write ``trace`` to ``out_dir/{programs,turns[,tool_calls]}.parquet`` atomically.

    Validation runs first; nothing is written when it fails. Returns the paths written.
    """
    validate(trace, where=str(out_dir))
    tables = {"programs": trace.programs, "turns": trace.turns}
    if trace.tool_calls is not None:
        tables["tool_calls"] = trace.tool_calls
    return write_tables(out_dir, {name: to_table(name, df) for name, df in tables.items()})


def write_tables(out_dir: str | os.PathLike[str], tables: dict[str, pa.Table]) -> dict[str, Path]:
    """Write Arrow tables as ``out_dir/<name>.parquet``: all to temporaries first, then rename each."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    temps: dict[str, Path] = {}
    try:
        for name, table in tables.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".parquet.tmp", dir=out)
            os.close(fd)
            temps[name] = Path(tmp)
            pq.write_table(table, tmp, compression="zstd")
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are ordinary shareable files
        final = {}
        for name, tmp_path in temps.items():
            final[name] = out / f"{name}.parquet"
            os.replace(tmp_path, final[name])
        return final
    finally:
        for tmp_path in temps.values():
            with contextlib.suppress(FileNotFoundError):
                tmp_path.unlink()


def open_table(path: str | os.PathLike[str], name: str) -> pa.Table:
    """Read one canonical table as Arrow, checking the schema version and column types (columns in schema order;
    a version-1 ``turns`` file lacks the columns added since)."""
    p = Path(path)
    try:
        pf = pq.ParquetFile(p)
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceError(f"{p}: not a readable Parquet file ({exc})") from exc
    meta = pf.schema_arrow.metadata or {}
    version = meta.get(SCHEMA_VERSION_KEY)
    if version is None:
        raise TraceError(f"{p}: no {SCHEMA_VERSION_KEY.decode()} in the Parquet metadata (not a canonical trace)")
    v = version.decode()
    if v != SCHEMA_VERSION and v not in READABLE_VERSIONS:
        raise TraceError(
            f"{p}: schema version {v!r}, this agentreplay reads {sorted([SCHEMA_VERSION, *READABLE_VERSIONS])}"
        )
    added = READABLE_VERSIONS.get(v, ()) if v != SCHEMA_VERSION else ()
    schema = SCHEMAS[name]
    got = pf.schema_arrow
    for field in schema:
        if field.name in added and field.name not in got.names:
            continue
        if field.name not in got.names:
            raise TraceError(f"{p}: required column {field.name!r} missing")
        actual = got.field(field.name).type
        if actual != field.type:
            raise TraceError(f"{p}: column {field.name!r} has type {actual}, expected {field.type}")
    return pf.read(columns=[f.name for f in schema if f.name in got.names])


def read_table(path: str | os.PathLike[str], name: str) -> pd.DataFrame:
    """Read one canonical table, checking the schema version and column types."""
    import pandas as pd

    df = open_table(path, name).to_pandas()
    # optional columns: absent (older versions) or all null read as None, like frames() builds them
    for col in OPTIONAL_COLUMNS.get(name, ()):
        if col not in df.columns or not df[col].notna().any():
            df[col] = pd.Series([None] * len(df), index=df.index, dtype=object)
    return df[[f.name for f in SCHEMAS[name]]]


def read_trace(trace_dir: str | os.PathLike[str], *, with_tool_calls: bool = False) -> Trace:
    """Read and validate a canonical trace directory."""
    d = Path(trace_dir)
    if not d.is_dir():
        raise TraceError(f"{d}: not a directory")
    frames = {}
    for name in REQUIRED_TABLES:
        p = d / f"{name}.parquet"
        if not p.exists():
            raise TraceError(f"{d}: {name}.parquet missing")
        frames[name] = read_table(p, name)
    tool_calls = None
    if with_tool_calls and (d / "tool_calls.parquet").exists():
        tool_calls = read_table(d / "tool_calls.parquet", "tool_calls")
    trace = Trace(frames["programs"], frames["turns"], tool_calls)
    validate(trace, where=str(d))
    return trace


def _first_bad(df: pd.DataFrame, mask: pd.Series) -> str:
    row = df[mask].iloc[0]
    turn = f", turn {int(row['turn_idx'])}" if "turn_idx" in row else ""
    return f"program {row['program_id']!r}{turn}"


def validate(trace: Trace, *, where: str = "<memory>") -> None:
    """Check the invariants the simulator relies on; raise :class:`TraceError` naming the first violation.

    - required columns present, non-nullable columns have no nulls;
    - program ids unique; every turn belongs to a program; ``n_turns`` matches;
    - ``turn_idx`` contiguous from 0 per program;
    - tokens and durations non-negative; ``reused_tokens <= input_tokens``;
    - ``tool_class`` in the taxonomy, ``tool_duration_kind`` and ``tokens_kind`` in their vocabularies.
    """
    progs, turns = trace.programs, trace.turns
    _validate_columns(progs, turns, where)
    _validate_ids(progs, turns, where)
    _validate_values(progs, turns, where)
    _validate_turn_counts(progs, turns, where)
    _validate_hash_ids(turns, where)
    _validate_links(progs, where)
    _validate_tool_calls(trace.tool_calls, where)


def _validate_columns(progs: pd.DataFrame, turns: pd.DataFrame, where: str) -> None:
    """Every required column present (optional ones may be absent), no null in a non-nullable column."""
    for name, df in (("programs", progs), ("turns", turns)):
        for field in SCHEMAS[name]:
            if field.name not in df.columns and field.name in OPTIONAL_COLUMNS[name]:
                continue  # optional (null when absent)
            if field.name not in df.columns:
                raise TraceError(f"{where}: {name}: required column {field.name!r} missing")
            if not field.nullable and df[field.name].isna().any():
                raise TraceError(f"{where}: {name}.{field.name} is null for {_first_bad(df, df[field.name].isna())}")


def _validate_ids(progs: pd.DataFrame, turns: pd.DataFrame, where: str) -> None:
    """Program ids unique; every turn belongs to a program."""
    dup = progs["program_id"].duplicated()
    if dup.any():
        raise TraceError(f"{where}: programs.program_id duplicated: {progs.loc[dup, 'program_id'].iloc[0]!r}")
    orphan = ~turns["program_id"].isin(progs["program_id"])
    if orphan.any():
        raise TraceError(f"{where}: turns.program_id has no program row: {_first_bad(turns, orphan)}")


def _validate_values(progs: pd.DataFrame, turns: pd.DataFrame, where: str) -> None:
    """Tokens and durations non-negative, ``reused_tokens <= input_tokens``, vocabulary columns in vocabulary."""
    for col in (
        "input_tokens",
        "output_tokens",
        "reused_tokens",
        "provider_cached_tokens",
        "reasoning_tokens",
        "tool_duration_s",
        "llm_latency_s",
    ):
        bad = turns[col] < 0
        if bad.any():
            raise TraceError(
                f"{where}: turns.{col} negative ({turns.loc[bad, col].iloc[0]}) at {_first_bad(turns, bad)}"
            )
    bad = turns["reused_tokens"] > turns["input_tokens"]
    if bad.any():
        raise TraceError(f"{where}: turns.reused_tokens exceeds input_tokens at {_first_bad(turns, bad)}")
    bad = progs["shared_prefix_tokens"] < 0
    if bad.any():
        raise TraceError(
            f"{where}: programs.shared_prefix_tokens negative for program {progs.loc[bad, 'program_id'].iloc[0]!r}"
        )
    for col, vocab in (
        ("tool_class", TOOL_CLASSES),
        ("tokens_kind", TOKENS_KINDS),
        ("tool_duration_kind", TOOL_DURATION_KINDS),
    ):
        bad = turns[col].notna() & ~turns[col].isin(vocab)
        if bad.any():
            raise TraceError(
                f"{where}: turns.{col} = {turns.loc[bad, col].iloc[0]!r} not in {list(vocab)} at "
                f"{_first_bad(turns, bad)}"
            )


def _validate_turn_counts(progs: pd.DataFrame, turns: pd.DataFrame, where: str) -> None:
    """``turn_idx`` contiguous from 0 per program, then ``n_turns`` equal to the program's turn count."""
    if len(turns):
        order = turns.sort_values(["program_id", "turn_idx"], kind="stable")
        expected = order.groupby("program_id", sort=False).cumcount()
        bad_idx = order["turn_idx"].to_numpy() != expected.to_numpy()
        if bad_idx.any():
            row = order[bad_idx].iloc[0]
            raise TraceError(
                f"{where}: turns.turn_idx not contiguous from 0: program {row['program_id']!r} "
                f"has turn {int(row['turn_idx'])} where {int(expected[bad_idx].iloc[0])} was expected"
            )
    counts = turns.groupby("program_id").size()
    n = progs.set_index("program_id")["n_turns"]
    mismatch = n != counts.reindex(n.index).fillna(0).astype(int)
    if mismatch.any():
        pid = mismatch[mismatch].index[0]
        raise TraceError(
            f"{where}: programs.n_turns = {int(n[pid])} for program {pid!r} but it has {int(counts.get(pid, 0))} turns"
        )


def _validate_links(progs: pd.DataFrame, where: str) -> None:
    """Parent links between programs (:func:`agentreplay.trace.dag_check.validate_links`), when any is set."""
    if "parent_program_id" in progs.columns and progs["parent_program_id"].notna().any():
        from agentreplay.trace.dag_check import LinkError, validate_links

        try:
            validate_links(progs, where)
        except LinkError as exc:
            raise TraceError(str(exc)) from None


def _validate_tool_calls(tc: pd.DataFrame | None, where: str) -> None:
    """Tool-call durations non-negative (when the optional ``tool_calls`` table is present)."""
    if tc is not None and len(tc):
        bad = tc["duration_s"] < 0
        if bad.any():
            raise TraceError(
                f"{where}: tool_calls.duration_s negative for program "
                f"{tc.loc[bad, 'program_id'].iloc[0]!r}, call {int(tc.loc[bad, 'call_idx'].iloc[0])}"
            )


def _validate_hash_ids(turns: pd.DataFrame, where: str) -> None:
    """``prefix_hash_ids`` (when given) need ``hash_block_tokens >= 1`` and may not name more blocks than the
    prompt has (the last may be partial: ``len(ids) <= ceil(input_tokens / hash_block_tokens)``)."""
    if "prefix_hash_ids" not in turns.columns or not turns["prefix_hash_ids"].notna().any():
        return
    import pandas as pd

    has = turns["prefix_hash_ids"].notna()
    hbt = turns["hash_block_tokens"] if "hash_block_tokens" in turns.columns else pd.Series(None, index=turns.index)
    bad = has & (hbt.isna() | (hbt.fillna(0) < 1))
    if bad.any():
        raise TraceError(
            f"{where}: turns.hash_block_tokens must be >= 1 where prefix_hash_ids is set, got "
            f"{hbt[bad].iloc[0]!r} at {_first_bad(turns, bad)}"
        )
    n_ids = turns.loc[has, "prefix_hash_ids"].map(len)
    limit = -(-turns.loc[has, "input_tokens"] // hbt[has].astype("int64"))
    over = n_ids > limit
    if over.any():
        sub = turns.loc[has][over.to_numpy()]
        row = sub.iloc[0]
        raise TraceError(
            f"{where}: turns.prefix_hash_ids names {len(row['prefix_hash_ids'])} blocks of "
            f"{int(row['hash_block_tokens'])} tokens, more than the {int(row['input_tokens'])}-token "
            f"prompt has, at {_first_bad(sub, pd.Series(True, index=sub.index))}"
        )
