"""Schema 3 fan-out links: older files still read (links null), bad links named with file, field and value."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from agentreplay.sim.workload import load_workload
from agentreplay.trace.io import TraceError, read_trace, write_tables, write_trace
from agentreplay.trace.schema import DAG_COLUMNS, SCHEMA_VERSION, SCHEMA_VERSION_KEY, TABLE_KEY
from tests.factories import make_trace


def linked(parent: str = "p0", turn: int = 0):  # type: ignore[no-untyped-def]
    trace = make_trace([[(100, 1, 1.0), (200, 1, None)], [(120, 2, None)]])
    trace.programs["parent_program_id"] = [None, parent]
    trace.programs["parent_turn_idx"] = [None, turn]
    trace.programs["spawn_delay_s"] = [None, 0.25]
    return trace


def test_schema_version_is_3() -> None:
    assert SCHEMA_VERSION == "3"


def test_links_round_trip_and_compile(tmp_path) -> None:  # type: ignore[no-untyped-def]
    write_trace(tmp_path, linked())
    back = read_trace(tmp_path)
    assert back.programs["parent_program_id"].isna().tolist() == [True, False]
    assert back.programs["parent_program_id"][1] == "p0"
    w = load_workload(tmp_path)
    assert w.dag is not None
    assert w.dag.parent.tolist() == [-1, 0]
    assert w.dag.spawn_turn.tolist() == [-1, 0]
    assert w.dag.spawn_delay_s.tolist() == [0.0, 0.25]
    assert w.dag.share_tokens.tolist() == [0, 100]  # min(parent's turn-0 prompt 100, child's prompt 120)


def test_a_version_2_file_reads_with_null_links(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A v2 trace (no link columns, version "2" in the metadata) is read with the three columns null and
    compiles to a workload without a DAG."""
    write_trace(tmp_path / "v3", make_trace([[(100, 1, 1.0), (200, 1, None)]]))
    tables = {}
    for name in ("programs", "turns"):
        t = pq.read_table(tmp_path / "v3" / f"{name}.parquet")
        if name == "programs":
            t = t.drop_columns(list(DAG_COLUMNS))
        tables[name] = t.replace_schema_metadata({SCHEMA_VERSION_KEY: b"2", TABLE_KEY: name.encode()})
    write_tables(tmp_path / "v2", tables)
    assert pq.read_schema(tmp_path / "v2" / "programs.parquet").metadata[SCHEMA_VERSION_KEY] == b"2"
    trace = read_trace(tmp_path / "v2")
    for col in DAG_COLUMNS:
        assert trace.programs[col].isna().all()
    w = load_workload(tmp_path / "v2")
    assert w.dag is None and w.n_turns == 2


@pytest.mark.parametrize(
    ("parent", "turn", "message"),
    [
        ("nope", 0, "programs.parent_program_id = 'nope' for program 'p1': no such program"),
        ("p1", 0, "programs.parent_program_id = 'p1' for program 'p1': its own parent"),
        ("p0", 2, "programs.parent_turn_idx = 2 for program 'p1' out of range: its parent 'p0' has turns 0..1"),
        ("p0", -1, "programs.parent_turn_idx = -1 for program 'p1' out of range"),
    ],
)
def test_bad_links_are_named(tmp_path, parent: str, turn: int, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TraceError, match=str(tmp_path).replace("\\", "\\\\") + ": " + _re(message)):
        write_trace(tmp_path, linked(parent, turn))


def test_a_cycle_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = make_trace([[(100, 1, 1.0), (200, 1, None)], [(120, 2, 1.0), (130, 1, None)]])
    trace.programs["parent_program_id"] = ["p1", "p0"]
    trace.programs["parent_turn_idx"] = [0, 0]
    with pytest.raises(TraceError, match=r"programs\.parent_program_id forms a cycle through program"):
        write_trace(tmp_path, trace)


def test_negative_spawn_delay_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = linked()
    trace.programs["spawn_delay_s"] = [None, -1.0]
    with pytest.raises(TraceError, match=r"programs.spawn_delay_s = -1.0 negative for program 'p1'"):
        write_trace(tmp_path, trace)


def _re(s: str) -> str:
    import re

    return re.escape(s)
