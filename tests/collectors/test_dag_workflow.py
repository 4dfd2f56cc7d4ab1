"""The DAG workflow collector on its hand-written sample (tests/collectors/data/dag_workflows.jsonl, written for
these tests from the issue's description of the AgentServeSim / LLMServingSim form; see the collector's doc)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.workload import load_workload
from collectors.base import BadInput
from collectors.dag_workflow import parse_workflow
from collectors.registry import collect, detect_format
from tests.sim.fakes import LinearPerf

SAMPLE = Path(__file__).parent / "data" / "dag_workflows.jsonl"


def test_sample_maps_to_parent_and_children(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """wf-a: plan -> {s1 -> s1b, s2} -> merge (plan -> merge 1 s): root wf-a = [plan, merge] with a 1 s gap;
    children wf-a/s1 = [s1, s1b] (spawned 5 ms after plan, 2 s gap inside) and wf-a/s2 = [s2], both at turn 0.
    wf-b is a plain two-turn chain arriving at 3 s with a 0.25 s gap."""
    assert detect_format(SAMPLE) == "dag-workflow"
    res = collect("dag-workflow", SAMPLE, tmp_path)
    assert res.skips == []
    p = res.trace.programs.set_index("program_id")
    assert p.index.tolist() == ["wf-a", "wf-a/s1", "wf-a/s2", "wf-b"]
    assert p["n_turns"].tolist() == [2, 2, 1, 2]
    assert p.loc["wf-a/s1", "parent_program_id"] == "wf-a"
    assert p.loc["wf-a/s1", "parent_turn_idx"] == 0
    assert p.loc["wf-a/s1", "spawn_delay_s"] == pytest.approx(0.005)
    assert p.loc["wf-b", "arrival_s"] == pytest.approx(3.0)
    t = res.trace.turns
    root = t[t["program_id"] == "wf-a"]
    assert root["input_tokens"].tolist() == [1000, 1300]
    assert root["reused_tokens"].tolist() == [0, 1050]  # append-only: 1000 + 50
    assert root["tool_duration_s"].tolist()[0] == pytest.approx(1.0)
    s1 = t[t["program_id"] == "wf-a/s1"]
    assert s1["tool_duration_s"].tolist()[0] == pytest.approx(2.0)
    w = load_workload(tmp_path)
    assert w.dag is not None
    assert w.dag.parent.tolist() == [-1, 0, 0, -1]
    assert w.dag.share_tokens.tolist() == [0, 1000, 1000, 0]  # min(plan's 1000-token prompt, child's smallest)


def test_sample_join_time_under_a_constant_pricer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """0.01 s per iteration, arrivals from the trace. wf-a: plan (1000 in, 50 out): prefill emits token 1 at
    0.01, 49 decode steps: finishes at 0.50. s2 arrives at 0.50 and starts an iteration (0.50 - 0.51); s1
    arrives at 0.505 and joins the batch at 0.51: its 80 tokens take 80 iterations, to 1.31. The 1 s gap ends
    at 1.50; s1 waits 2 s, s1b (20 tokens) runs 3.31 - 3.51: the join releases merge at 3.51, which finishes 40
    iterations later at 3.91 (every iteration costs 0.01 s whatever wf-b, arriving at 3.0, adds to the batch)."""
    collect("dag-workflow", SAMPLE, tmp_path)
    cfg = SimConfig().replace(cache={"num_gpu_blocks": 2000}, workload={"arrival": "trace"})
    res = simulate(load_workload(tmp_path), cfg, perf=LinearPerf(a=0.01, b=0.0))
    t = res.turns.set_index(["program_id", "turn_idx"])
    assert t.loc[("wf-a", 0), "finish_s"] == pytest.approx(0.50)
    assert t.loc[("wf-a/s1", 0), "finish_s"] == pytest.approx(1.31)
    assert t.loc[("wf-a", 1), "release_s"] == pytest.approx(3.51)
    assert t.loc[("wf-a", 1), "finish_s"] == pytest.approx(3.91)


@pytest.mark.parametrize(
    ("edges", "message"),
    [
        ([{"src": "a", "dst": "zz"}], "edge field 'dst' = 'zz': no such node"),
        ([], "2 nodes without predecessors"),
        ([{"src": "a", "dst": "b"}, {"src": "b", "dst": "a"}], "0 nodes without predecessors"),
    ],
)
def test_bad_workflows_are_named(edges, message: str) -> None:  # type: ignore[no-untyped-def]
    obj = {
        "workflow_id": "w",
        "nodes": [{"id": "a", "input_toks": 10, "output_toks": 1}, {"id": "b", "input_toks": 20, "output_toks": 1}],
        "edges": edges,
    }
    with pytest.raises(BadInput, match=message):
        parse_workflow(json.loads(json.dumps(obj)), 7)


def test_a_join_fed_by_an_unrelated_node_is_refused() -> None:
    """r -> {x, y}; x -> j; y -> j; z... is unreachable: the walk names it."""
    obj = {
        "workflow_id": "w",
        "nodes": [{"id": k, "input_toks": 10, "output_toks": 1} for k in ("r", "x", "y", "j", "z")],
        "edges": [
            {"src": "r", "dst": "x"},
            {"src": "r", "dst": "y"},
            {"src": "x", "dst": "j"},
            {"src": "y", "dst": "j"},
            {"src": "r", "dst": "z"},
            {"src": "z", "dst": "j"},
            {"src": "x", "dst": "z"},
        ],
    }
    with pytest.raises(BadInput, match="workflow 'w'"):
        parse_workflow(obj, 1)
