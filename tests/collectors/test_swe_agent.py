"""SWE-agent collector: hand-made .traj files (1.x with query, 0.x without), the real SWE-smith file, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agentreplay.trace.io import validate
from collectors.swe_agent import SweAgentCollector, classify_action
from collectors.tokens import CHARS_PER_TOKEN
from tests.conftest import shared_path

SWE_SMITH = ("datasets", "swe-smith-tool-timings", "test.json")
LMCACHE = ("datasets", "lmcache-agent-trace-miniswe")

SYSTEM = "You are a helpful assistant that can interact with a computer to solve tasks."  # 77 chars
INSTANCE = "<uploaded_files>/testbed</uploaded_files> Fix the bug in foo.py so that foo() returns 2."  # 88
STEPS = [  # thought, action, observation, execution_time
    ("Let me look at the file.", "str_replace_editor view /testbed/foo.py", "1\tdef foo():\n2\t    return 1", 0.25),
    ("Run the tests.", "cd /testbed && python -m pytest tests/test_foo.py -q", "1 failed, 3 passed", 3.5),
    ("Done.", "submit", "diff --git a/foo.py b/foo.py", 0.125),
]


def tok(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _assistant(thought: str, action: str) -> dict:
    name = action.split()[0]
    if name == "str_replace_editor":
        args: dict = {"command": "view", "path": "/testbed/foo.py"}
    elif name == "submit":
        args = {}
    else:
        name, args = "bash", {"command": action}
    return {
        "role": "assistant",
        "content": thought,
        "agent": "main",
        "message_type": "action",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
    }


def _tool(obs: str) -> dict:
    return {
        "role": "tool",
        "content": [{"type": "text", "text": "OBSERVATION:\n" + obs}],
        "agent": "main",
        "message_type": "observation",
        "tool_call_ids": ["call_1"],
    }


def make_traj(*, with_query: bool = True) -> dict:
    """A SWE-agent 1.x trajectory (``get_trajectory_data``) of three steps; ``with_query=False`` is 0.x-like."""
    head = [
        {"role": "system", "content": SYSTEM, "agent": "main", "message_type": "system_prompt"},
        {
            "role": "user",
            "content": [{"type": "text", "text": INSTANCE}],
            "agent": "main",
            "message_type": "observation",
        },
    ]
    history, steps = list(head), []
    for thought, action, obs, t in STEPS:
        step = {
            "action": action,
            "observation": obs,
            "response": thought,
            "thought": thought,
            "execution_time": t,
            "state": {"working_dir": "/testbed"},
            "extra_info": {},
        }
        if with_query:
            step["query"] = [dict(m) for m in history]
        steps.append(step)
        history += [_assistant(thought, action), _tool(obs)]
    replay = {
        "problem_statement": {"id": "foo__bar-1", "type": "text"},
        "agent": {"model": {"name": "claude-sonnet-4-20250514"}},
    }
    return {
        "trajectory": steps,
        "history": history,
        "environment": "main",
        "info": {
            "model_stats": {"instance_cost": 0.1, "tokens_sent": 700, "tokens_received": 40, "api_calls": 3},
            "exit_status": "submitted",
            "submission": "diff",
        },
        "replay_config": json.dumps(replay) if with_query else None,
    }


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_traj_with_query_exact_turns(tmp_path) -> None:
    f = write(tmp_path / "run" / "foo__bar-1" / "foo__bar-1.traj", make_traj())
    r = SweAgentCollector().collect(tmp_path / "run")
    assert (r.files_read, r.skips) == (1, [])
    validate(r.trace)
    p = r.trace.programs.iloc[0]
    assert (p.program_id, p.source, p.task_id, p.agent, p.model) == (
        "swe-agent/foo__bar-1",
        "swe-agent",
        "foo__bar-1",
        "swe-agent",
        "claude-sonnet-4-20250514",
    )
    assert p.resolved is None and p.n_turns == 3
    assert (p.shared_prefix_id, p.shared_prefix_tokens) == ("swe-agent/system", 24)  # ceil(77 / 3.2526)
    t = r.trace.turns
    # step 0 prompt: system (77 chars -> 24 tokens) + instance (88 -> 28); step 1 adds the assistant message
    # (thought + tool-call name + arguments: 24 + 18 + 46 = 88 chars -> 28) and the tool message (13 + 27 = 40
    # -> 13); step 2 adds 14 + 4 + 67 = 85 -> 27 and 13 + 18 = 31 -> 10.
    assert t["input_tokens"].tolist() == [52, 93, 130]
    assert t["input_tokens"].tolist() == [tok(SYSTEM) + tok(INSTANCE), 52 + 28 + 13, 93 + 27 + 10]
    # output: thought + "\n" + action (64, 67, 12 chars)
    assert t["output_tokens"].tolist() == [tok(f"{s[0]}\n{s[1]}") for s in STEPS] == [20, 21, 4]
    assert t["reused_tokens"].tolist() == [0, 52 + 20, 93 + 21]
    assert t["tool_name"].tolist() == ["str_replace_editor", "cd", "submit"]
    assert t["tool_class"].tolist() == ["read", "test", "submit"]
    assert t["tool_duration_s"].tolist()[:2] == [0.25, 3.5] and pd_isna(t["tool_duration_s"].iloc[2])
    assert t["tool_duration_kind"].tolist()[:2] == ["measured", "measured"]
    assert (t["tokens_kind"] == "estimated").all()
    tc = r.trace.tool_calls
    assert tc["duration_s"].tolist() == [0.25, 3.5, 0.125] and tc["turn_idx"].tolist() == [0, 1, 2]
    assert any("tokens_sent 700 vs estimated input 275" in n for n in r.notes)
    assert str(f).endswith(".traj")


def pd_isna(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def test_traj_without_query_rebuilds_append_only_context(tmp_path) -> None:
    f = write(tmp_path / "astropy__astropy-1234.traj", make_traj(with_query=False))
    r = SweAgentCollector().collect(f)
    validate(r.trace)
    p = r.trace.programs.iloc[0]
    assert (p.program_id, p.model) == ("swe-agent/astropy__astropy-1234", "unknown")
    t = r.trace.turns
    out = [tok(f"{s[0]}\n{s[1]}") for s in STEPS]
    in0 = tok(SYSTEM) + tok(INSTANCE)
    in1 = in0 + out[0] + tok(STEPS[0][2])
    in2 = in1 + out[1] + tok(STEPS[1][2])
    assert t["input_tokens"].tolist() == [in0, in1, in2] == [52, 81, 108]
    assert t["reused_tokens"].tolist() == [0, in0 + out[0], in1 + out[1]]


def test_elided_query_counts_only_common_leading_messages(tmp_path) -> None:
    data = make_traj()
    q2 = data["trajectory"][2]["query"]
    q2[3] = dict(q2[3], content=[{"type": "text", "text": "Old environment output (elided)"}])
    r = SweAgentCollector().collect(write(tmp_path / "x.traj", data))
    t = r.trace.turns
    # query 1 = [sys, user, asst0, tool0]; query 2 differs at message 3, so only sys + user + asst0 are reused
    assert t["reused_tokens"].iloc[2] == 24 + 28 + 28


def test_classify_action() -> None:
    assert classify_action("str_replace_editor create /testbed/r.py --file_text 'x'") == ("str_replace_editor", "edit")
    assert classify_action("find_file foo.py") == ("find_file", "search")
    assert classify_action("grep -rn foo . | head") == ("grep", "search")
    assert classify_action("cat <<'EOF' > a.py\nx\nEOF") == ("cat", "edit")
    assert classify_action("") == (None, "other")


@pytest.fixture(scope="module")
def smith():
    return SweAgentCollector().collect(shared_path(*SWE_SMITH))


def test_swe_smith_programs_and_measured_durations(smith) -> None:
    raw = json.loads(shared_path(*SWE_SMITH).read_text())
    assert smith.n_programs == len(raw) == 5 and smith.skips == []
    validate(smith.trace)
    t, p = smith.trace.turns, smith.trace.programs
    n_calls = 0
    for obj in raw:
        msgs = json.loads(obj["messages"])
        sums = [sum(tc["execution_time_seconds"] for tc in m["tool_calls"]) for m in msgs if m["role"] == "assistant"]
        n_calls += sum(len(m["tool_calls"]) for m in msgs if m["role"] == "assistant")
        pid = f"swe-smith/{obj['traj_id']}"
        got = t[t["program_id"] == pid].sort_values("turn_idx")["tool_duration_s"].tolist()
        assert len(got) == len(sums)
        assert got[:-1] == pytest.approx(sums[:-1], abs=1e-12) and pd_isna(got[-1])
        row = p[p["program_id"] == pid].iloc[0]
        assert (row.task_id, row.model, row.resolved) == (obj["instance_id"], obj["model"], obj["resolved"])
    assert smith.n_tool_calls == n_calls == 125
    assert (t["reused_tokens"] <= t["input_tokens"]).all()
    assert (t.loc[t["turn_idx"] > 0, "reused_tokens"] > 0).all()
    assert set(p["shared_prefix_id"]) == {"swe-smith/system"}
    assert (p["source"] == "swe-smith").all() and (p["agent"] == "swe-agent").all()
    assert set(t["tool_class"]) == {"read", "edit", "test", "search", "submit"}


def test_swe_smith_bad_object_is_skipped_others_ingest(tmp_path) -> None:
    def obj(i: int, exec_s: float = 0.5) -> dict:
        msgs = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": INSTANCE},
            {
                "role": "assistant",
                "content": "look",
                "tool_calls": [
                    {"function": {"name": "bash", "arguments": '{"command": "ls"}'}, "execution_time_seconds": exec_s},
                    {
                        "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'},
                        "execution_time_seconds": 2.0,
                    },
                ],
            },
            {"role": "tool", "content": "a b"},
            {"role": "tool", "content": "ok"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "submit", "arguments": "{}"}, "execution_time_seconds": 0.01}],
            },
        ]
        return {"messages": json.dumps(msgs), "instance_id": f"i{i}", "resolved": False, "model": "m", "traj_id": ""}

    bad_neg = obj(1, exec_s=-1.0)
    no_msgs = {k: v for k, v in obj(2).items() if k != "messages"}
    truncated = dict(obj(3), messages=obj(3)["messages"][:50])
    f = write(tmp_path / "test.json", [obj(0), bad_neg, no_msgs, truncated, obj(4)])
    r = SweAgentCollector().collect(f)
    assert r.trace.programs["program_id"].tolist() == ["swe-smith/i0", "swe-smith/i4"]
    assert [s.path for s in r.skips] == [str(f)] * 3
    reasons = [s.reason for s in r.skips]
    assert reasons[0].startswith("test.json[1]: ") and "negative" in reasons[0]
    assert reasons[1].startswith("test.json[2]: ") and "messages" in reasons[1]
    assert reasons[2].startswith("test.json[3]: ")
    t = r.trace.turns
    assert t["tool_duration_s"].tolist()[0] == 2.5  # two calls in one response: summed
    assert t["tool_class"].tolist()[:2] == ["test", "submit"]  # pytest outranks ls
    assert r.n_tool_calls == 6


def test_broken_traj_files_skipped_rest_ingested(tmp_path) -> None:
    good = write(tmp_path / "good.traj", make_traj())
    raw = json.dumps(make_traj())
    (tmp_path / "truncated.traj").write_text(raw[: len(raw) // 2])
    write(tmp_path / "missing.traj", {k: v for k, v in make_traj().items() if k != "trajectory"})
    neg = make_traj()
    neg["trajectory"][1]["execution_time"] = -2.0
    write(tmp_path / "negative.traj", neg)
    (tmp_path / "empty.traj").write_text("")
    zero = make_traj()
    zero["trajectory"] = []
    write(tmp_path / "zero.traj", zero)
    r = SweAgentCollector().collect(tmp_path)
    assert r.n_programs == 1 and r.files_read == 1
    assert r.trace.programs["program_id"].tolist() == ["swe-agent/foo__bar-1"]
    skipped = {Path(s.path).name: s.reason for s in r.skips}
    assert set(skipped) == {"truncated.traj", "missing.traj", "negative.traj", "empty.traj", "zero.traj"}
    assert "JSONDecodeError" in skipped["truncated.traj"]
    assert "trajectory" in skipped["missing.traj"]
    assert "trajectory[1].execution_time = -2.0 is negative" in skipped["negative.traj"]
    assert "empty" in skipped["empty.traj"] and "zero steps" in skipped["zero.traj"]
    assert all(str(tmp_path) in s.path for s in r.skips) and good.exists()


def test_detect(tmp_path) -> None:
    c = SweAgentCollector()
    f = write(tmp_path / "a" / "b" / "x.traj", make_traj())
    assert c.detect(f) and c.detect(tmp_path)
    assert c.detect(shared_path(*SWE_SMITH)) and c.detect(shared_path(*SWE_SMITH).parent)
    lm = shared_path(*LMCACHE)
    assert not c.detect(lm) and not c.detect(sorted(lm.glob("*.jsonl"))[0])
    assert not c.detect(write(tmp_path / "other.json", [{"timestamp": 1, "tool": "Bash"}]))
