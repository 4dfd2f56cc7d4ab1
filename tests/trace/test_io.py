"""Canonical trace IO: round trip, schema version, validation errors that name program and turn, atomicity."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from agentreplay.trace.io import TraceError, read_trace, validate, write_trace
from agentreplay.trace.schema import SCHEMA_VERSION, SCHEMA_VERSION_KEY
from tests.factories import make_trace


def test_round_trip_keeps_rows_and_version(tmp_path) -> None:
    trace = make_trace([[(100, 10, 1.5), (130, 5, None)], [(50, 2, None)]], shared_prefix_tokens=20)
    paths = write_trace(tmp_path, trace)
    assert sorted(p.name for p in paths.values()) == ["programs.parquet", "turns.parquet"]
    meta = pq.ParquetFile(tmp_path / "turns.parquet").schema_arrow.metadata
    assert meta[SCHEMA_VERSION_KEY].decode() == SCHEMA_VERSION
    back = read_trace(tmp_path)
    assert back.turns["input_tokens"].tolist() == [100, 130, 50]
    assert back.turns["reused_tokens"].tolist() == [0, 110, 0]
    assert back.programs["n_turns"].tolist() == [2, 1]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.turns.loc.__setitem__((1, "turn_idx"), 2), "program 'p0' has turn 2 where 1 was expected"),
        (lambda t: t.turns.loc.__setitem__((0, "input_tokens"), -1), "turns.input_tokens negative"),
        (lambda t: t.turns.loc.__setitem__((0, "tool_duration_s"), -0.5), "turns.tool_duration_s negative"),
        (lambda t: t.turns.loc.__setitem__((0, "tool_class"), "compile"), "turns.tool_class = 'compile'"),
        (lambda t: t.programs.loc.__setitem__((0, "n_turns"), 3), "n_turns = 3 for program 'p0'"),
        (lambda t: t.turns.loc.__setitem__((1, "reused_tokens"), 10_000), "reused_tokens exceeds input_tokens"),
    ],
)
def test_validation_names_the_offender(mutate, message) -> None:
    trace = make_trace([[(100, 10, 1.5), (130, 5, None)]])
    mutate(trace)
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(trace)


def test_failed_write_leaves_nothing(tmp_path) -> None:
    trace = make_trace([[(100, 10, 1.5), (130, 5, None)]])
    trace.turns.loc[0, "output_tokens"] = -5
    with pytest.raises(TraceError):
        write_trace(tmp_path / "out", trace)
    assert not (tmp_path / "out").exists()


def test_reader_rejects_foreign_parquet(tmp_path) -> None:
    import pandas as pd

    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "programs.parquet")
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "turns.parquet")
    with pytest.raises(TraceError, match="not a canonical trace"):
        read_trace(tmp_path)


def test_reader_rejects_wrong_column_type(tmp_path) -> None:
    import pyarrow as pa

    write_trace(tmp_path, make_trace([[(100, 10, None)]]))
    table = pq.read_table(tmp_path / "turns.parquet")
    idx = table.schema.get_field_index("input_tokens")
    table = table.set_column(idx, "input_tokens", table.column(idx).cast(pa.float64()))
    pq.write_table(table, tmp_path / "turns.parquet")
    with pytest.raises(TraceError, match="column 'input_tokens' has type double"):
        read_trace(tmp_path)
