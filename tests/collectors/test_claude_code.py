"""Claude Code collector: real-data counts and durations, bad-input skips, exact values on a tiny task."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from agentreplay.trace.io import validate
from collectors.claude_code import ClaudeCodeCollector
from collectors.tokens import estimate_tokens
from tests.conftest import shared_path

ROOT = ("datasets", "swe-rebench-claude-code")


def _iso(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


# ---------------------------------------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def real():
    root = shared_path(*ROOT)
    return root, ClaudeCodeCollector().collect(root)


def _readable_trace(p: Path) -> bool:
    try:
        lines = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    except ValueError:
        return False
    return any(
        o.get("type") == "assistant" and o.get("isSidechain") is False and o["message"].get("model") != "<synthetic>"
        for o in lines
    )


@pytest.mark.shared
def test_real_tool_calls_all_entries_with_exact_durations(real):
    root, res = real
    files = sorted(root.glob("*/*/attempt_*/tool_calls.json"))
    expected = {}
    for f in files:
        variant = f.parents[2].name.removeprefix("all_images_")
        for k, e in enumerate(json.loads(f.read_text())):
            dur = (_iso(e["end_timestamp"]) - _iso(e["timestamp"])).total_seconds()
            expected[(f"claude-code/{variant}/{f.parents[1].name}", k)] = (e["tool"], dur)
    tc = res.trace.tool_calls
    assert len(tc) == len(expected) == sum(len(json.loads(f.read_text())) for f in files)
    got = {(r.program_id, r.call_idx): (r.tool_name, r.duration_s) for r in tc.itertuples()}
    assert got == expected
    assert (tc["duration_kind"] == "measured").all()
    assert (tc["start_s"] >= 0).all()


@pytest.mark.shared
def test_real_programs_turns_and_validate(real):
    root, res = real
    traces = sorted(root.glob("*/*/attempt_*/trace.jsonl"))
    readable = sum(_readable_trace(p) for p in traces)
    assert res.n_programs == readable
    assert len(res.skips) == len(traces) - readable
    validate(res.trace)
    progs, turns = res.trace.programs, res.trace.turns
    assert progs["program_id"].str.match(r"^claude-code/(haiku|local)/").all()
    # tasks that have only tool_calls.json appear in tool_calls but not in programs
    tc_only = set(res.trace.tool_calls["program_id"]) - set(progs["program_id"])
    assert tc_only and any(n.startswith(f"{len(tc_only)} task(s) have tool_calls.json") for n in res.notes)
    assert (turns["reused_tokens"] <= turns["input_tokens"]).all()
    last = turns.groupby("program_id")["turn_idx"].transform("max") == turns["turn_idx"]
    assert turns.loc[last, "tool_duration_s"].isna().all()
    assert turns.loc[~last, "tool_duration_s"].notna().all()
    # turn-linked tool calls point at existing turns
    tc = res.trace.tool_calls.dropna(subset=["turn_idx"])
    keys = set(zip(turns["program_id"], turns["turn_idx"], strict=True))
    assert all((p, int(t)) in keys for p, t in zip(tc["program_id"], tc["turn_idx"], strict=True))


@pytest.mark.shared
def test_detect():
    root = shared_path(*ROOT)
    c = ClaudeCodeCollector()
    assert c.detect(root)
    assert c.detect(root / "all_images_haiku")
    assert c.detect(next((root / "all_images_local").iterdir()))
    assert not c.detect(shared_path("datasets", "lmcache-agent-trace-miniswe"))


# ---------------------------------------------------------------------------------------------- hand-made

T0 = "2026-01-01T00:00:"


def _line(kind: str, ts: str, **msg) -> dict:
    return {"type": kind, "isSidechain": False, "timestamp": T0 + ts, "message": msg}


def _usage(inp: int, read: int, create: int, out: int) -> dict:
    return {
        "input_tokens": inp,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": create,
        "output_tokens": out,
    }


def good_trace() -> list[dict]:
    """Two calls: A (thinking + Bash tool_use, placeholder output) then B (text, final output 7)."""
    model = "claude-x"
    return [
        {"type": "summary", "summary": "s"},
        _line("user", "00.000Z", role="user", content="Fix this issue: x"),
        _line(
            "assistant",
            "02.000Z",
            id="msg_A",
            model=model,
            role="assistant",
            stop_reason=None,
            content=[{"type": "thinking", "thinking": "a" * 13}],
            usage=_usage(3, 1000, 200, 2),
        ),
        _line(
            "assistant",
            "02.500Z",
            id="msg_A",
            model=model,
            role="assistant",
            stop_reason=None,
            content=[{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "pytest -q"}}],
            usage=_usage(3, 1000, 200, 2),
        ),
        _line("user", "07.500Z", role="user", content=[{"type": "tool_result", "tool_use_id": "toolu_1"}]),
        _line(
            "assistant",
            "09.000Z",
            id="msg_B",
            model=model,
            role="assistant",
            stop_reason="end_turn",
            content=[{"type": "text", "text": "done"}],
            usage=_usage(5, 1203, 50, 7),
        ),
    ]


def good_tools() -> list[dict]:
    return [
        {
            "timestamp": T0 + "02.500Z",
            "end_timestamp": T0 + "07.450Z",
            "tool": "Bash",
            "id": "toolu_1",
            "input": {"command": "pytest -q"},
            "result_preview": "ok",
        }
    ]


def _task(root: Path, name: str, trace: list[dict] | str | None, tools: list[dict] | str | None) -> Path:
    d = root / "all_images_mini" / name / "attempt_1"
    d.mkdir(parents=True)
    if trace is not None:
        text = trace if isinstance(trace, str) else "".join(json.dumps(o) + "\n" for o in trace)
        (d / "trace.jsonl").write_text(text)
    if tools is not None:
        (d / "tool_calls.json").write_text(tools if isinstance(tools, str) else json.dumps(tools))
    return d.parent


def test_tiny_task_exact_rows(tmp_path):
    task = _task(tmp_path, "task_ok", good_trace(), good_tools())
    c = ClaudeCodeCollector()
    assert c.detect(task) and c.detect(tmp_path)
    res = c.collect(task)
    assert res.fmt == "claude-code" and res.files_read == 2 and res.skips == []
    validate(res.trace)
    pid = "claude-code/mini/task_ok"
    prog = res.trace.programs.iloc[0].to_dict()
    assert prog == {
        "program_id": pid,
        "source": "claude-code",
        "task_id": "task_ok",
        "agent": "claude-code",
        "model": "claude-x",
        "n_turns": 2,
        "resolved": None,
        "arrival_s": None,
        "shared_prefix_id": "claude-code/mini",
        "shared_prefix_tokens": 1000,
        "parent_program_id": None,
        "parent_turn_idx": None,
        "spawn_delay_s": None,
    }
    # Turn 0 has no stop_reason (placeholder output 2): output is estimated from thinking + tool input JSON,
    # ceil(37 / 3.2526) = 12 with today's ratio, reasoning ceil(13 / 3.2526) = 4. Turn 1 carries stop_reason,
    # so its logged 7 is final.
    out0 = estimate_tokens("a" * 13 + json.dumps({"command": "pytest -q"}))
    think0 = estimate_tokens("a" * 13)
    expected = pd.DataFrame(
        [
            {
                "program_id": pid,
                "turn_idx": 0,
                "input_tokens": 1203,
                "output_tokens": out0,
                "reused_tokens": 0,
                "provider_cached_tokens": 1000,
                "reasoning_tokens": think0,
                "tokens_kind": "estimated",
                "tool_class": "test",
                "tool_name": "Bash",
                "tool_duration_s": 4.95,
                "tool_duration_kind": "measured",
                "llm_latency_s": 2.5,
                "t_request_s": 0.0,
                "t_response_s": 2.5,
            },
            {
                "program_id": pid,
                "turn_idx": 1,
                "input_tokens": 1258,
                "output_tokens": 7,
                "reused_tokens": min(1203 + out0, 1258),
                "provider_cached_tokens": 1203,
                "reasoning_tokens": None,
                "tokens_kind": "exact",
                "tool_class": "other",
                "tool_name": None,
                "tool_duration_s": None,
                "tool_duration_kind": None,
                "llm_latency_s": 1.5,
                "t_request_s": 7.5,
                "t_response_s": 9.0,
            },
        ]
    )
    got = res.trace.turns.reset_index(drop=True)
    for col in expected.columns:
        for g, e in zip(got[col], expected[col], strict=True):
            assert (pd.isna(g) and pd.isna(e)) or g == pytest.approx(e), (col, g, e)
    tc = res.trace.tool_calls.iloc[0]
    assert (tc["program_id"], tc["call_idx"], tc["turn_idx"], tc["tool_class"]) == (pid, 0, 0, "test")
    assert tc["start_s"] == 0.0 and tc["duration_s"] == pytest.approx(4.95)


def test_bad_files_are_skipped_and_siblings_ingested(tmp_path):
    good_text = "".join(json.dumps(o) + "\n" for o in good_trace())
    no_usage = good_trace()
    del no_usage[2]["message"]["usage"]
    late_end = good_tools()
    late_end[0]["end_timestamp"] = T0 + "01.000Z"
    backwards = good_trace()
    backwards[5]["timestamp"] = T0 + "01.000Z"
    _task(tmp_path, "good", good_trace(), good_tools())
    _task(tmp_path, "trunc_trace", good_text[: len(good_text) - 40], good_tools())
    _task(tmp_path, "no_usage", no_usage, good_tools())
    _task(tmp_path, "end_before_start", good_trace(), late_end)
    _task(tmp_path, "empty_trace", "", None)
    _task(tmp_path, "trunc_tools", None, json.dumps(good_tools())[:50])
    _task(tmp_path, "non_monotonic", backwards, None)
    res = ClaudeCodeCollector().collect(tmp_path)

    reasons = {Path(s.path).relative_to(tmp_path / "all_images_mini").as_posix(): s.reason for s in res.skips}
    assert set(reasons) == {
        "trunc_trace/attempt_1/trace.jsonl",
        "no_usage/attempt_1/trace.jsonl",
        "end_before_start/attempt_1/tool_calls.json",
        "empty_trace/attempt_1/trace.jsonl",
        "trunc_tools/attempt_1/tool_calls.json",
        "non_monotonic/attempt_1/trace.jsonl",
    }
    assert "invalid JSON" in reasons["trunc_trace/attempt_1/trace.jsonl"]
    assert "usage" in reasons["no_usage/attempt_1/trace.jsonl"]
    assert "before timestamp" in reasons["end_before_start/attempt_1/tool_calls.json"]
    assert "no assistant" in reasons["empty_trace/attempt_1/trace.jsonl"]
    assert "invalid JSON" in reasons["trunc_tools/attempt_1/tool_calls.json"]
    assert "non-monotonic" in reasons["non_monotonic/attempt_1/trace.jsonl"]

    validate(res.trace)
    # good + end_before_start have programs (the latter with an estimated gap: next request 7.5 - response 2.5)
    assert sorted(res.trace.programs["task_id"]) == ["end_before_start", "good"]
    turns = res.trace.turns.set_index(["program_id", "turn_idx"])
    assert turns.loc[("claude-code/mini/good", 0), "tool_duration_kind"] == "measured"
    row = turns.loc[("claude-code/mini/end_before_start", 0)]
    assert row["tool_duration_kind"] == "estimated" and row["tool_duration_s"] == pytest.approx(5.0)
    # tool calls of tasks whose trace is bad still count, unlinked to turns
    tc = res.trace.tool_calls.set_index("program_id")
    assert set(tc.index) == {"claude-code/mini/good", "claude-code/mini/trunc_trace", "claude-code/mini/no_usage"}
    assert pd.isna(tc.loc["claude-code/mini/trunc_trace", "turn_idx"])
    # files_read: good (2) + end_before_start trace (1) + trunc_trace/no_usage tool_calls (2)
    assert res.files_read == 5
