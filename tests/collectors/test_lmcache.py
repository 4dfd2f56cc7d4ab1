"""LMCache collector: the real miniswe trace checked against an independent read, a hand-made session, bad files."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from agentreplay.trace.io import validate
from collectors.lmcache import PREFIX_ID, LMCacheCollector
from collectors.tokens import CHARS_PER_TOKEN
from tests.conftest import shared_path

LMCACHE = ("datasets", "lmcache-agent-trace-miniswe")
SWE_SMITH = ("datasets", "swe-smith-tool-timings", "test.json")


def tok(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@pytest.fixture(scope="module")
def real():
    return LMCacheCollector().collect(shared_path(*LMCACHE))


def test_real_trace_matches_an_independent_read(real) -> None:
    sessions: dict[str, list[dict]] = defaultdict(list)
    for f in sorted(shared_path(*LMCACHE).glob("*.jsonl")):
        for line in f.read_text().splitlines():
            o = json.loads(line)
            sessions[o["session_id"]].append(o)
    n_requests = sum(len(v) for v in sessions.values())
    assert (n_requests, len(sessions)) == (402, 20)
    assert (real.n_turns, real.n_programs, real.files_read, real.skips) == (402, 20, 20, [])
    validate(real.trace)
    t, p = real.trace.turns, real.trace.programs
    t0 = min(o["timestamp"] for v in sessions.values() for o in v)
    for sid, reqs in sessions.items():
        reqs.sort(key=lambda o: o["timestamp"])
        rows = t[t["program_id"] == f"lmcache/{sid}"].sort_values("turn_idx")
        assert rows["t_request_s"].tolist() == pytest.approx([(o["timestamp"] - t0) / 1e6 for o in reqs])
        assert rows["t_request_s"].is_monotonic_increasing
        assert rows["input_tokens"].tolist() == [tok(o["input"]) for o in reqs]
        assert rows["output_tokens"].tolist() == [tok(o["output"]) for o in reqs]
        assert p.loc[p["program_id"] == f"lmcache/{sid}", "arrival_s"].iloc[0] == pytest.approx(
            (reqs[0]["timestamp"] - t0) / 1e6
        )
    assert (t["reused_tokens"] <= t["input_tokens"]).all()
    assert (t.loc[t["turn_idx"] == 0, "reused_tokens"] == 0).all()
    last = t.groupby("program_id")["turn_idx"].transform("max") == t["turn_idx"]
    assert t.loc[last, "tool_duration_s"].isna().all()
    assert (t.loc[~last, "tool_duration_s"] >= 0).all() and (t.loc[~last, "tool_duration_kind"] == "estimated").all()
    assert (p["shared_prefix_id"] == PREFIX_ID).all() and (p["model"] == "unknown").all()
    assert 0 < p["shared_prefix_tokens"].iloc[0] <= t.loc[t["turn_idx"] == 0, "input_tokens"].min()
    assert any(n.startswith("prompt reuse: mean lcp / previous prompt length") for n in real.notes)
    assert set(t["tool_class"]) >= {"search", "edit", "test", "submit"}


def _line(sid: str, ts: object, inp: str, out: str) -> str:
    return json.dumps({"timestamp": ts, "input": inp, "output": out, "session_id": sid})


SYS = "<pr_description>\nFix foo.\n</pr_description>\n"  # 43 chars
OUT_GREP = "THOUGHT: look.\n\n```bash\ngrep -rn foo src\n```"
OUT_EDIT = "THOUGHT: fix.\n\n```bash\nsed -i 's/1/2/' src/foo.py && python -m pytest -q\n```"
OUT_SUBMIT = "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```"


def _session_file(path: Path) -> Path:
    a = SYS + "Begin."
    b = a + "\nsrc/foo.py:1:foo"
    c = b + "\n<returncode>0</returncode>"
    lines = [  # out of order on purpose; timestamps in microseconds
        _line("s1", 1_000_000 + 9_000_000, c, OUT_SUBMIT),
        _line("s1", 1_000_000, a, OUT_GREP),
        _line("s1", 1_000_000 + 4_000_000, b, OUT_EDIT),
        _line("s2", 3_000_000, SYS + "Other task.", "no command here"),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_hand_made_sessions_exact(tmp_path) -> None:
    f = _session_file(tmp_path / "x.jsonl")
    r = LMCacheCollector().collect(f)
    validate(r.trace)
    p, t = r.trace.programs, r.trace.turns
    assert p["program_id"].tolist() == ["lmcache/s1", "lmcache/s2"]
    assert p["arrival_s"].tolist() == [0.0, 2.0]
    assert p["n_turns"].tolist() == [3, 1]
    assert (p["agent"] == "mini-swe-agent").all() and p["resolved"].isna().all()
    s1 = t[t["program_id"] == "lmcache/s1"]
    a = SYS + "Begin."
    b = a + "\nsrc/foo.py:1:foo"
    assert s1["t_request_s"].tolist() == [0.0, 4.0, 9.0]
    assert s1["input_tokens"].tolist() == [tok(a), tok(b), tok(b + "\n<returncode>0</returncode>")] == [16, 21, 29]
    # append-only prompts: the common prefix with the previous prompt is the whole previous prompt
    assert s1["reused_tokens"].tolist() == [0, tok(a), tok(b)] == [0, 16, 21]
    assert s1["tool_class"].tolist() == ["search", "test", "submit"]
    assert s1["tool_name"].tolist() == ["grep", "sed", "echo"]
    s2 = t[t["program_id"] == "lmcache/s2"].iloc[0]
    assert s2.tool_class == "other" and pd.isna(s2.tool_name)
    # shared prefix: the common start of both first prompts ("<pr_description>\nFix foo.\n</pr_description>\n")
    assert p["shared_prefix_tokens"].tolist() == [tok(SYS)] * 2 == [14, 14]
    # durations: max(0, gap - output_tokens * s_per_token), s_per_token = 5th percentile of gap/output over both gaps
    g = [4.0 / tok(OUT_GREP), 5.0 / tok(OUT_EDIT)]
    spt = g[0] + 0.05 * (g[1] - g[0]) if g[0] < g[1] else g[1] + 0.05 * (g[0] - g[1])
    expected = [max(0.0, 4.0 - tok(OUT_GREP) * spt), max(0.0, 5.0 - tok(OUT_EDIT) * spt)]
    assert s1["tool_duration_s"].tolist()[:2] == pytest.approx(expected)
    assert expected[1] == 0.0 < expected[0]  # the faster gap is floored at 0
    assert math.isnan(s1["tool_duration_s"].iloc[2])


def test_non_append_only_prompt_reuse_is_the_common_prefix(tmp_path) -> None:
    f = tmp_path / "y.jsonl"
    f.write_text(_line("s", 1, "A" * 40 + "B" * 20, "x") + "\n" + _line("s", 2, "A" * 40 + "C" * 30, "y") + "\n")
    r = LMCacheCollector().collect(f)
    assert r.trace.turns["reused_tokens"].tolist() == [0, tok("A" * 40)]
    assert any("mean lcp / previous prompt length 0.6667" in n for n in r.notes)


def test_bad_files_are_skipped_whole_with_line_numbers(tmp_path) -> None:
    d = tmp_path / "trace"
    d.mkdir()
    _session_file(d / "good.jsonl")
    ok = _line("t", 5, "p", "o")
    (d / "truncated.jsonl").write_text(ok + "\n" + ok[:30] + "\n")
    missing = json.dumps({"timestamp": 7, "input": "p", "output": "o"})
    (d / "missing.jsonl").write_text(ok + "\n" + ok + "\n" + missing + "\n")
    (d / "badts.jsonl").write_text(_line("u", 1.5, "p", "o") + "\n")
    (d / "empty.jsonl").write_text("")
    # a session that also has lines in a skipped file is dropped: its prefix chain would be broken
    (d / "zpartial.jsonl").write_text(_line("s2", 4_000_000, SYS + "Other task. more", "x") + "\n" + "{oops\n")
    r = LMCacheCollector().collect(d)
    skipped = {Path(s.path).name: s.reason for s in r.skips}
    assert set(skipped) == {"truncated.jsonl", "missing.jsonl", "badts.jsonl", "empty.jsonl", "zpartial.jsonl"}
    assert skipped["truncated.jsonl"].startswith("line 2: not valid JSON")
    assert skipped["missing.jsonl"] == "line 3: missing field(s) ['session_id']"
    assert skipped["badts.jsonl"].startswith("line 1: timestamp 1.5 is not a non-negative integer")
    assert "empty" in skipped["empty.jsonl"] and skipped["zpartial.jsonl"].startswith("line 2:")
    assert all(s.path.startswith(str(d)) for s in r.skips)
    assert r.trace.programs["program_id"].tolist() == ["lmcache/s1"]  # s2 dropped, t/u never read
    assert r.n_turns == 3 and r.files_read == 1
    assert any("session s2: dropped" in n for n in r.notes)


def test_detect(tmp_path) -> None:
    c = LMCacheCollector()
    lm = shared_path(*LMCACHE)
    assert c.detect(lm) and c.detect(sorted(lm.glob("*.jsonl"))[0])
    assert c.detect(_session_file(tmp_path / "x.jsonl"))
    smith = shared_path(*SWE_SMITH)
    assert not c.detect(smith) and not c.detect(smith.parent)
    (tmp_path / "t.traj").write_text("{}")
    other = tmp_path / "o"
    other.mkdir()
    (other / "trace.jsonl").write_text(json.dumps({"type": "user", "message": {}}) + "\n")
    assert not c.detect(other) and not c.detect(tmp_path / "t.traj")
