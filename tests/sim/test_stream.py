"""Streaming results (agentreplay.sim.stream): the Parquet written as programs finish holds the in-memory run's
tables (same schema, same rows once sorted by their keys), the summary is the same (less the findings, which read
every turn), and a failed run leaves no file that looks complete."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow.parquet as pq
import pytest

from agentreplay.features.footprint import footprint as footprint_mod
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim import stream as stream_mod
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf

#: 12 programs of 1 to 6 turns with tool gaps (0, 0.3 or 0.6 s), sharing a system prefix
TRACE = make_trace(
    [[(800 + 700 * t, 30 + 7 * p, 0.3 * (p % 3)) for t in range(1 + p % 6)] for p in range(12)],
    shared_prefix_tokens=300,
)

CONFIGS = {
    "default": {},
    "preempting": {"cache": {"num_gpu_blocks": 700}, "workload": {"concurrency": 12}},
    "two instances, poisson": {"hardware": {"instances": 2}, "workload": {"arrival": "poisson", "rate_per_s": 3.0}},
    "three instances, least-loaded, host tier": {
        "hardware": {"instances": 3},
        "router": {"policy": "least-loaded"},
        "tiers": {"dram_gib": 1.0},
        "policy": {"retention": "ttl"},
    },
    "disaggregated, failures of both pools": {
        "disagg": {"enabled": True, "prefill_instances": 2, "decode_instances": 2},
        "failures": {
            "events": [
                {"instance": 2, "at_s": 1.0, "kind": "fail", "recover_after_s": 1.0},
                {"instance": 0, "at_s": 2.0, "kind": "fail", "recover_after_s": 0.5},
                {"instance": 3, "at_s": 2.5, "kind": "drain", "recover_after_s": 0.5},
            ]
        },
    },
    # the mechanisms whose tables and summaries are built from every program: footprint streamed as it grows,
    # failover ledger and class goodput from the programs written
    "failures, footprint, classes": {
        "hardware": {"instances": 2},
        "router": {"policy": "least-loaded"},
        "failures": {
            "events": [
                {"instance": 0, "at_s": 1.0, "kind": "fail", "recover_after_s": 1.0},
                {"instance": 1, "at_s": 2.5, "kind": "drain", "recover_after_s": 0.5},
            ]
        },
        "footprint": {"interval_s": 0.05},
        "classes": {"enabled": True, "deadline_s": {"interactive": 5.0}},
        "policy": {"queue": "priority"},
    },
}
KEYS = {
    "turns": ["program_id", "turn_idx"],
    "programs": ["program_id"],
    "instances": ["time_s", "instance"],
    "footprint": ["time_s", "instance"],
    "failover": ["t_s", "program_id", "turn", "event"],
}


def same_summary(streamed: dict[str, Any], mem: dict[str, Any]) -> bool:
    """The same numbers (json: NaN compares equal to NaN) but the findings, which only the in-memory run has."""
    assert "findings" not in streamed and "findings" in mem
    rest = {k: v for k, v in mem.items() if k != "findings"}
    return json.dumps(streamed, sort_keys=True) == json.dumps(rest, sort_keys=True)


def _sorted(table, keys):
    return table.sort_by([(k, "ascending") for k in keys])


@pytest.mark.parametrize("group", [5, 1])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_streamed_tables_and_summary_equal_the_in_memory_ones(name, group, tmp_path, monkeypatch) -> None:
    """Several row groups per file; the row buffer (2 x ``group`` rows) fills many times, and at one row per
    group the rows of the programs live at once outgrow it (it doubles). The instance samples' buffer fills and
    is written many times too, and the series keeps the in-memory order."""
    monkeypatch.setattr(stream_mod, "ROW_GROUP_ROWS", group)
    monkeypatch.setattr(stream_mod, "SAMPLE_ROWS", 3)
    monkeypatch.setattr(footprint_mod, "FLUSH_ROWS", 3 * group)
    cfg = SimConfig().replace(**CONFIGS[name])
    mem = simulate(TRACE, cfg)
    streamed = simulate(TRACE, cfg, stream_to=tmp_path)
    for table, want in mem.tables().items():
        got = pq.read_table(tmp_path / f"{table}.parquet")
        assert got.schema.equals(want.schema, check_metadata=True), table
        assert _sorted(got, KEYS[table]).equals(_sorted(want, KEYS[table])), table
    assert pq.ParquetFile(tmp_path / "turns.parquet").num_row_groups > 1
    assert pq.ParquetFile(tmp_path / "instances.parquet").num_row_groups > 1
    assert pq.read_table(tmp_path / "instances.parquet").equals(mem.tables()["instances"])
    # same numbers (json: NaN compares equal to NaN)
    assert same_summary(streamed.summary, mem.summary)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{t}.parquet" for t in mem.tables())
    if name == "failures, footprint, classes":
        assert mem.summary["failover"]["affected_calls"] > 0 and set(mem.summary["classes"]) > {"source"}
        # the series was written in several row groups as it grew, in time order (as in memory)
        fp = pq.ParquetFile(tmp_path / "footprint.parquet")
        assert fp.num_row_groups > 1
        assert pq.read_table(tmp_path / "footprint.parquet").equals(mem.tables()["footprint"])


def test_rows_are_written_as_programs_finish(tmp_path) -> None:
    """p0: two turns (100 + 10 tokens, a 2 s tool, 130 + 5); p1: one turn (50 + 3). Both run at once
    (concurrency 2): p1 ends within its first second, p0 only after its 2 s tool. With one row per row group
    the turns file holds p1's turn (group 1) then p0's two turns (group 2: a program's rows go out together)."""
    trace = make_trace([[(100, 10, 2.0), (130, 5, None)], [(50, 3, None)]])
    cfg = SimConfig().replace(cache={"num_gpu_blocks": 1000}, workload={"concurrency": 2})
    from agentreplay.sim.stream import ResultStream

    assert ResultStream.__init__.__defaults__ == (None,)
    simulate(trace, cfg, perf=LinearPerf(), stream_to=tmp_path)
    turns = pq.ParquetFile(tmp_path / "turns.parquet")
    assert [turns.metadata.row_group(i).num_rows for i in range(turns.num_row_groups)] == [3]  # default size
    t = turns.read().to_pydict()
    assert list(zip(t["program_id"], t["turn_idx"], strict=True)) == [("p1", 0), ("p0", 0), ("p0", 1)]
    assert t["tool_s"] == [None, 2.0, None]
    progs = pq.read_table(tmp_path / "programs.parquet").to_pydict()
    assert progs["program_id"] == ["p1", "p0"]
    assert progs["n_turns"] == [1, 2]
    assert progs["tool_s"] == [0.0, 2.0]
    assert progs["finish_s"][0] < 1.0 < 2.0 < progs["finish_s"][1]


def test_one_row_group_per_finished_program_at_row_group_size_one(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(stream_mod, "ROW_GROUP_ROWS", 1)
    trace = make_trace([[(100, 10, 2.0), (130, 5, None)], [(50, 3, None)]])
    cfg = SimConfig().replace(cache={"num_gpu_blocks": 1000}, workload={"concurrency": 2})
    simulate(trace, cfg, perf=LinearPerf(), stream_to=tmp_path)
    turns = pq.ParquetFile(tmp_path / "turns.parquet")
    assert [turns.metadata.row_group(i).num_rows for i in range(turns.num_row_groups)] == [1, 2]
    programs = pq.ParquetFile(tmp_path / "programs.parquet")
    assert programs.num_row_groups == 2


def test_a_failed_run_leaves_no_file_that_looks_complete(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(stream_mod, "ROW_GROUP_ROWS", 2)
    seen: list[list[str]] = []

    def progress(done: int, total: int) -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        if done == 6:
            raise KeyboardInterrupt  # (any exception: the run is interrupted half way)

    with pytest.raises(KeyboardInterrupt):
        simulate(TRACE, SimConfig(), progress=progress, stream_to=tmp_path)
    # while running, rows were on disk, under names that are not the outputs'
    assert any(".turns.parquet.partial" in names for names in seen)
    assert not any("turns.parquet" in names for names in seen)
    assert list(tmp_path.iterdir()) == []  # the partial files are removed


def test_a_streamed_result_has_no_tables_in_memory(tmp_path) -> None:
    res = simulate(TRACE, SimConfig(), stream_to=tmp_path / "run")
    with pytest.raises(RuntimeError, match="streamed"):
        res.columns("turns")
    paths = res.write(tmp_path / "run")
    assert sorted(paths) == ["config.toml", "instances", "programs", "summary.json", "turns"]
    assert res.summary["programs"] == 12 and res.summary["turns"] == sum(1 + p % 6 for p in range(12))
    assert not math.isnan(res.summary["jct_s"]["mean"])


def test_row_group_rows_must_be_positive(tmp_path) -> None:
    from agentreplay.sim.stream import ResultStream
    from agentreplay.sim.workload import compile_trace

    with pytest.raises(ValueError, match="row_group_rows must be >= 1, got 0"):
        ResultStream(compile_trace(TRACE), tmp_path, row_group_rows=0)


def test_a_finished_programs_segments_leave_every_pool_map_when_it_finishes(tmp_path) -> None:
    """A finished program's history segment leaves the segment map of every pool it is in as the program
    finishes, whether its blocks are evicted, still cached or still held (the objects stay with their holders);
    other programs' segments and other keys stay."""
    from types import SimpleNamespace

    from agentreplay.sim.stream import ResultStream
    from agentreplay.sim.workload import compile_trace

    s = ResultStream(compile_trace(TRACE), tmp_path)
    evicted = SimpleNamespace(run=None, ref=0)
    cached = SimpleNamespace(run=object(), ref=0)
    held = SimpleNamespace(run=None, ref=1)
    live = SimpleNamespace(run=None, ref=1)
    a = SimpleNamespace(segments={("prog", 0): evicted, ("prog", 1): cached, ("x", 0): 1})
    b = SimpleNamespace(segments={("prog", 1): cached, ("prog", 2): held, ("prog", 3): live})
    s.pools = [a, b]
    for p in range(4):
        s.program_arrived(p, 0.0)
    for p in range(3):
        s.program_finished(p, 1.0)
    assert list(a.segments) == [("x", 0)]
    assert list(b.segments) == [("prog", 3)]
    assert cached.run is not None and held.ref == 1  # (only the keys went)
    s.abort()


def test_a_day_workload_streamed_hands_back_finished_turns(tmp_path, monkeypatch) -> None:
    """A day workload (arrays in their own memory maps) streamed with small row groups: the tables equal the
    in-memory run's (on a fresh copy of the same workload), and the pages of the turns of programs already written
    were handed back (they read as zeros now; nothing reads them again)."""
    import numpy as np

    from agentreplay.synth_day import day_workload
    from agentreplay.trace.io import read_trace

    monkeypatch.setattr(stream_mod, "ROW_GROUP_ROWS", 2000)
    source = read_trace(stream_mod.Path(__file__).resolve().parents[2] / "datasets" / "swebench-verified")
    cfg = SimConfig().replace(hardware={"model": "llama-3.1-8b", "instances": 2}, workload={"concurrency": 16})
    streamed_w = day_workload(source, 200, seed=4)
    assert streamed_w.input_tokens.min() > 0
    mem = simulate(day_workload(source, 200, seed=4), cfg)
    streamed = simulate(streamed_w, cfg, stream_to=tmp_path)
    for table, want in mem.tables().items():
        got = pq.read_table(tmp_path / f"{table}.parquet")
        assert _sorted(got, KEYS[table]).equals(_sorted(want, KEYS[table])), table
    assert same_summary(streamed.summary, mem.summary)
    zero = streamed_w.input_tokens == 0
    assert zero.sum() > streamed_w.n_turns // 2  # most of the day's pages were handed back
    assert np.array_equal(zero, streamed_w.output_tokens == 0)


@pytest.mark.parametrize("router", ["session-affinity", "least-loaded"])
def test_fan_out_workflows_stream_the_in_memory_tables_and_summary(router, tmp_path, monkeypatch) -> None:
    """An orchestrator spawning four sub-agents (schema 3 parent links) among twelve independent programs that
    later push its blocks out: the streamed tables and summary (workflow JCTs included) are the in-memory run's,
    and no finished program's history segment is left in any pool's map, though a child's prefix chain puts its
    parent's segment in the child's pool, where the parent itself never ran (session affinity)."""
    monkeypatch.setattr(stream_mod, "ROW_GROUP_ROWS", 2)
    programs = [[(300 + 40 * t, 6, 0.2) for t in range(1 + p % 3)] for p in range(5)]
    programs += [[(900 + 100 * t, 8, 0.1) for t in range(3)] for _ in range(12)]
    trace = make_trace(programs)
    n = len(trace.programs)
    trace.programs["parent_program_id"] = [None] + ["p0"] * 4 + [None] * (n - 5)
    trace.programs["parent_turn_idx"] = [None] + [0] * 4 + [None] * (n - 5)
    trace.programs["spawn_delay_s"] = [None] + [0.1] * 4 + [None] * (n - 5)
    cfg = SimConfig().replace(
        hardware={"instances": 3},
        router={"policy": router},
        cache={"num_gpu_blocks": 120},
        workload={"concurrency": 4},
    )
    left: list[tuple] = []
    close = stream_mod.ResultStream.close

    def checked_close(self, *args):
        out = close(self, *args)
        for i, pool in enumerate(self.pools):
            left.extend((i, k) for k in pool.segments if k[0] == "prog")  # (every program has finished)
        return out

    mem = simulate(trace, cfg)
    monkeypatch.setattr(stream_mod.ResultStream, "close", checked_close)
    streamed = simulate(trace, cfg, stream_to=tmp_path)
    assert mem.summary["fanout"]["sub_agents"] == 4
    for table, want in mem.tables().items():
        got = pq.read_table(tmp_path / f"{table}.parquet")
        assert _sorted(got, KEYS[table]).equals(_sorted(want, KEYS[table])), table
    assert same_summary(streamed.summary, mem.summary)
    assert left == []


def test_the_row_buffer_keeps_pending_then_live_rows_in_order(tmp_path) -> None:
    """make_room moves the rows still needed to the front (pending finished programs', then live programs', each
    in order), renumbers their positions, drops the rows already written, and doubles the buffer when they fill
    more than half of it."""
    from agentreplay.sim.stream import ResultStream
    from agentreplay.sim.workload import compile_trace

    s = ResultStream(compile_trace(TRACE), tmp_path, row_group_rows=2)  # a buffer of 4 rows
    turn = s.buffer[0]
    turn[:] = [10, 11, 12, 13]
    s._pending[:] = [2]  # row 2: a finished program's, not yet written; rows 0 and 1: written
    s.live_rows.update({7: [3], 8: []})
    assert s.make_room(4) == 2
    assert len(s.buffer[0]) == 4 and list(s.buffer[0][:2]) == [12, 13]
    assert s._pending == [0] and s.live_rows == {7: [1], 8: []}
    s.buffer[0][2:] = [14, 15]
    s.live_rows[8] = [2, 3]
    assert s.make_room(4) == 4  # all four rows still needed: the buffer doubles
    assert len(s.buffer[0]) == 8 and list(s.buffer[0][:4]) == [12, 13, 14, 15]
    assert s._pending == [0] and s.live_rows == {7: [1], 8: [2, 3]}
    with pytest.raises(RuntimeError, match="make_room at row 3 of a buffer of 8"):
        s.make_room(3)


@pytest.mark.parametrize(
    "sections",
    [
        {"hardware": {"instances": 3}, "router": {"policy": "least-loaded"}},
        {"disagg": {"enabled": True, "prefill_instances": 1, "decode_instances": 2}},
        {
            "hardware": {"instances": 3},
            "router": {"policy": "least-loaded"},
            "failures": {"events": [{"instance": 0, "at_s": 1.0, "kind": "fail", "recover_after_s": 0.5}]},
        },
        {
            "disagg": {"enabled": True, "prefill_instances": 1, "decode_instances": 2},
            "failures": {"events": [{"instance": 2, "at_s": 1.0, "kind": "fail", "recover_after_s": 0.5}]},
        },
    ],
    ids=["moving programs", "disaggregated", "a failed instance", "a failed decode instance"],
)
def test_every_segment_of_a_finished_program_is_forgotten(sections, tmp_path, monkeypatch) -> None:
    """Programs routed to several instances (least-loaded moves them) or whose history also sits in decode pools
    (disaggregated): when the stream closes (every program finished), no program's history segment is left in
    any pool's map, whichever pool it is in."""
    left: list[tuple[int, tuple]] = []
    close = stream_mod.ResultStream.close
    first_pools: list[object] = []
    arrived = stream_mod.ResultStream.program_arrived

    def first_arrival(self, p, now):
        if not first_pools:
            first_pools.extend(self.pools)
        arrived(self, p, now)

    def checked_close(self, *args):
        out = close(self, *args)
        # a failed instance goes on with a fresh pool: the stream searches that one, not the lost one
        failed = [e["instance"] for e in sections.get("failures", {}).get("events", [])]
        assert [k for k in range(len(self.pools)) if self.pools[k] is not first_pools[k]] == failed
        for i, pool in enumerate(self.pools):
            left.extend([(i, k) for k in pool.segments if k[0] == "prog"])
        return out

    monkeypatch.setattr(stream_mod.ResultStream, "close", checked_close)
    monkeypatch.setattr(stream_mod.ResultStream, "program_arrived", first_arrival)
    cfg = SimConfig().replace(cache={"num_gpu_blocks": 300}, workload={"concurrency": 12}, **sections)
    res = simulate(TRACE, cfg, stream_to=tmp_path)
    assert res.summary["programs"] == 12
    assert left == []
