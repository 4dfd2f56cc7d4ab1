"""mini-swe-agent collector: exact sums on the real run, broken copies of real files, the 1.1 format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentreplay.trace.io import read_trace, validate
from collectors.base import CollectError
from collectors.mini_swe_agent import MiniSweAgentCollector
from collectors.registry import collect
from collectors.tokens import CHARS_PER_TOKEN, calibrate
from tests.conftest import shared_path

TRAJS = ("datasets", "swebench-verified-mini-swe-agent", "trajs")


@pytest.fixture(scope="module")
def real():
    return MiniSweAgentCollector().collect(shared_path(*TRAJS))


def test_real_run_counts_and_exact_token_sums(real) -> None:
    assert real.n_programs == 500
    assert real.n_turns == 20_163
    assert int(real.trace.turns["input_tokens"].sum()) == 333_047_929
    assert int(real.trace.turns["output_tokens"].sum()) == 5_556_752
    assert real.skips == []
    validate(real.trace)


def test_real_run_sums_match_raw_usage_blocks_independently(real) -> None:
    root = shared_path(*TRAJS)
    prompt = completion = cached = 0
    for f in sorted(root.glob("*/*.traj.json")):
        for m in json.loads(f.read_text())["messages"]:
            if m["role"] == "assistant":
                u = m["extra"]["response"]["usage"]
                prompt += u["prompt_tokens"]
                completion += u["completion_tokens"]
                cached += u["prompt_tokens_details"]["cached_tokens"]
    t = real.trace.turns
    assert (int(t["input_tokens"].sum()), int(t["output_tokens"].sum())) == (prompt, completion)
    assert int(t["provider_cached_tokens"].sum()) == cached


def test_real_run_semantics(real) -> None:
    t, p = real.trace.turns, real.trace.programs
    assert p["resolved"].sum() == 371  # results_summary.csv
    last = t.groupby("program_id")["turn_idx"].transform("max") == t["turn_idx"]
    assert t.loc[last, "tool_duration_s"].isna().all()
    assert (t.loc[~last, "tool_duration_kind"] == "estimated").all()
    assert (t.loc[~last, "tool_duration_s"] >= 0).all()
    assert (t["reused_tokens"] <= t["input_tokens"]).all()
    assert (t.loc[t["turn_idx"] == 0, "reused_tokens"] == 0).all()
    assert p["shared_prefix_id"].nunique() == 1
    assert 100 < int(p["shared_prefix_tokens"].iloc[0]) < int(t.loc[t["turn_idx"] == 0, "input_tokens"].min())
    assert set(t["tool_class"]) >= {"test", "edit", "read", "search", "submit"}


def test_chars_per_token_constant_matches_calibration() -> None:
    ratio, pairs = calibrate(shared_path(*TRAJS))
    assert pairs == 19_663
    assert ratio == pytest.approx(CHARS_PER_TOKEN, abs=5e-4)


def _copy_sample(tmp_path: Path, n: int = 3) -> list[Path]:
    root = shared_path(*TRAJS)
    out = []
    for d in sorted(root.iterdir())[:n]:
        f = d / f"{d.name}.traj.json"
        dest = tmp_path / d.name / f.name
        dest.parent.mkdir(parents=True)
        shutil.copy(f, dest)
        out.append(dest)
    return out


def _edit(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_corrupted_copies_are_reported_and_the_rest_written(tmp_path) -> None:
    files = _copy_sample(tmp_path / "in", 6)
    files[0].write_text(files[0].read_text()[:5000])  # truncated JSON

    def drop_usage(d):
        next(m for m in d["messages"] if m["role"] == "assistant")["extra"]["response"].pop("usage")

    def reverse_time(d):
        asst = [m for m in d["messages"] if m["role"] == "assistant"]
        asst[1]["extra"]["response"]["created"] = asst[0]["extra"]["response"]["created"] - 100

    def empty(d):
        d["messages"] = [m for m in d["messages"] if m["role"] != "assistant"]

    def unknown(d):
        d["trajectory_format"] = "something-else-9"

    for f, fn in zip(files[1:], (drop_usage, reverse_time, empty, unknown), strict=False):
        _edit(f, fn)
    result = collect("mini-swe-agent", tmp_path / "in", tmp_path / "out")
    reasons = {Path(s.path).name: s.reason for s in result.skips}
    assert set(reasons) == {f.name for f in files[:5]}
    assert "JSONDecodeError" in reasons[files[0].name]
    assert "without a usage block" in reasons[files[1].name]
    assert "non-monotonic" in reasons[files[2].name]
    assert "empty trajectory" in reasons[files[3].name]
    assert "trajectory_format" in reasons[files[4].name]
    back = read_trace(tmp_path / "out")
    assert back.programs["task_id"].tolist() == [files[5].parent.name]


def test_strict_fails_and_writes_nothing(tmp_path) -> None:
    files = _copy_sample(tmp_path / "in", 2)
    files[0].write_text("{")
    with pytest.raises(CollectError, match="--strict"):
        collect("mini-swe-agent", tmp_path / "in", tmp_path / "out", strict=True)
    assert not (tmp_path / "out").exists()


def _msg11(role: str, content: str, ts: float | None, usage: dict | None = None) -> dict:
    extra: dict = {} if ts is None else {"timestamp": ts}
    if usage:
        extra["response"] = {"usage": usage, "model": "m"}
    return {"role": role, "content": content, "extra": extra}


def test_format_1_1_gives_measured_latency_and_tool_time(tmp_path) -> None:
    u = lambda p, c: {"prompt_tokens": p, "completion_tokens": c}  # noqa: E731
    msgs = [
        _msg11("system", "sys", None),
        _msg11("user", "task", 100.0),
        _msg11("assistant", "```mswea_bash_command\npytest -x\n```", 102.5, u(50, 10)),
        _msg11("user", "<output>ok</output>", 110.0),
        _msg11("assistant", "```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```", 111.0, u(80, 5)),
    ]
    f = tmp_path / "t1" / "t1.traj.json"
    f.parent.mkdir()
    f.write_text(json.dumps({"instance_id": "t1", "messages": msgs, "trajectory_format": "mini-swe-agent-1.1"}))
    r = MiniSweAgentCollector().collect(tmp_path)
    t = r.trace.turns
    assert t["llm_latency_s"].tolist() == [2.5, 1.0]
    assert t["tool_duration_s"].tolist()[0] == 7.5
    assert t["tool_duration_kind"].tolist()[0] == "measured"
    assert t["tool_class"].tolist() == ["test", "submit"]
    assert t["reused_tokens"].tolist() == [0, 60]
    assert t["t_request_s"].tolist() == [0.0, 10.0]  # relative to the run's first call (102.5 - 2.5)
