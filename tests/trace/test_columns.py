"""The pandas-free trace reader of ``simulate``: the same workload as the pandas path, and
every trace ``validate`` rejects is rejected with ``validate``'s own message."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from agentreplay.sim.workload import compile_trace, load_workload
from agentreplay.trace.columns import columns_valid, read_columns
from agentreplay.trace.io import Trace, TraceError, read_trace, write_tables, write_trace
from agentreplay.trace.schema import SCHEMA_VERSION, SCHEMA_VERSION_KEY, SCHEMAS, TABLE_KEY
from tests.factories import make_trace

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "datasets" / "swebench-verified"


def same_workload(a, b) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
        else:
            assert x == y, f.name


def hash_trace() -> Trace:
    """Two programs whose prompts name 4-token blocks; a third turn without ids; shuffled turn rows."""
    tr = make_trace([[(10, 2, 0.5), (14, 1, None)], [(9, 3, None)]], shared_prefix_tokens=4)
    turns = tr.turns.copy()
    turns["prefix_hash_ids"] = [[1, 2], [1, 2, 3], None]
    turns["hash_block_tokens"] = [4, 4, None]
    turns = turns.iloc[[2, 1, 0]].reset_index(drop=True)
    return Trace(tr.programs, turns)


@pytest.mark.parametrize(
    "make",
    [
        lambda: make_trace([[(100, 10, 1.5), (130, 0, None)], [(50, 2, None)]], shared_prefix_tokens=20),
        hash_trace,
    ],
)
def test_same_workload_as_the_pandas_path(tmp_path, make) -> None:
    write_trace(tmp_path, make())
    assert columns_valid(*read_columns(tmp_path))
    same_workload(load_workload(tmp_path), compile_trace(read_trace(tmp_path)))


@pytest.mark.skipif(not BUNDLED.exists(), reason="bundled trace absent")
def test_same_workload_on_the_bundled_trace() -> None:
    assert columns_valid(*read_columns(BUNDLED))
    same_workload(load_workload(BUNDLED), compile_trace(read_trace(BUNDLED)))


def _set(frame: str, row: int, col: str, value: object):
    def mutate(t: Trace) -> None:
        df = getattr(t, frame)
        if col in ("tool_class", "tokens_kind", "tool_duration_kind", "program_id", "source", "shared_prefix_id"):
            df[col] = df[col].astype(object)
        df.loc[row, col] = value

    return mutate


def _hash(ids: list[int], block: int | None):
    def mutate(t: Trace) -> None:
        t.turns["prefix_hash_ids"] = [ids, None, None]
        t.turns["hash_block_tokens"] = [block, None, None]

    return mutate


def _table(name: str, df) -> pa.Table:
    """The canonical table without validation, every field nullable (a foreign writer's file may hold nulls where
    the schema says none)."""
    schema = SCHEMAS[name]
    loose = pa.schema([f.with_nullable(True) for f in schema])
    table = pa.Table.from_pandas(df[[f.name for f in schema]], schema=loose, preserve_index=False)
    return table.replace_schema_metadata({SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode(), TABLE_KEY: name.encode()})


BAD = [
    _set("turns", 1, "turn_idx", 2),
    _set("turns", 1, "turn_idx", 0),
    _set("turns", 0, "input_tokens", -1),
    _set("turns", 0, "tool_duration_s", -0.5),
    _set("turns", 0, "llm_latency_s", -1.0),
    _set("turns", 0, "provider_cached_tokens", -3),
    _set("turns", 0, "tool_class", "compile"),
    _set("turns", 0, "tokens_kind", "guessed"),
    _set("turns", 0, "tool_duration_kind", "imagined"),
    _set("turns", 1, "reused_tokens", 10_000),
    _set("turns", 2, "program_id", "nobody"),
    _set("programs", 0, "n_turns", 3),
    _set("programs", 1, "program_id", "p0"),
    _set("programs", 0, "shared_prefix_tokens", -5),
    _set("programs", 0, "source", None),
    _set("turns", 0, "tool_class", None),
    _hash([1, 2, 3, 4, 5], 4),
    _hash([1], 0),
    _hash([1], None),
]


@pytest.mark.parametrize("mutate", BAD)
def test_what_validate_rejects_fails_with_its_message(tmp_path, mutate) -> None:
    trace = make_trace([[(10, 2, 1.5), (12, 5, None)], [(5, 2, None)]])
    trace.turns["prefix_hash_ids"] = None
    trace.turns["hash_block_tokens"] = None
    mutate(trace)
    write_tables(tmp_path, {"programs": _table("programs", trace.programs), "turns": _table("turns", trace.turns)})
    with pytest.raises(TraceError) as want:
        read_trace(tmp_path)
    assert not columns_valid(*read_columns(tmp_path))
    with pytest.raises(TraceError) as got:
        load_workload(tmp_path)
    assert str(got.value) == str(want.value)


def test_missing_and_foreign_files_fail_as_read_trace_does(tmp_path) -> None:
    for bad in (tmp_path / "nothing", tmp_path):
        with pytest.raises(TraceError) as want:
            read_trace(bad)
        with pytest.raises(TraceError) as got:
            load_workload(bad)
        assert str(got.value) == str(want.value)
