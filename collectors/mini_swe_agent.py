"""Collector for mini-swe-agent trajectories (``*.traj.json``, formats ``mini-swe-agent-1`` and ``-1.1``).

Native format (mini-swe-agent 1.x, e.g. the SWE-bench Verified leaderboard run bundled with this project):
``{"instance_id", "info", "trajectory_format", "messages": [system, task, assistant, observation, ...]}``.
Each assistant message carries ``extra.response``, the provider's OpenAI-style response, with ``created``
(unix seconds) and ``usage`` (``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``). The bash command
is the single fenced code block of the assistant message; the observation that follows is the tool output.

One LLM call = one turn:

- ``input_tokens`` / ``output_tokens`` / ``provider_cached_tokens`` / ``reasoning_tokens``: exactly the usage
  block (``tokens_kind = "exact"``). ``output_tokens`` includes reasoning tokens, as providers bill them.
- ``reused_tokens``: the prefix of this prompt that the previous call's KV cache holds. The next prompt is the
  previous prompt + the visible answer + the observation, so the reuse is ``prev_input + prev_output``
  capped at this input. When the previous call produced reasoning tokens, the generated sequence starts with
  them but the next prompt does not contain them, so an engine's prefix cache matches only ``prev_input``.
- ``tool_class``: the bash command classified by :mod:`agentreplay.trace.taxonomy`.
- Tool durations. Format ``-1`` logs only ``created`` per call: durations come from
  :mod:`collectors.gaps` (gap minus estimated LLM latency, one seconds-per-token fit per collected run),
  marked ``estimated``. Format ``-1.1`` (mini-swe-agent 2.x) stamps ``extra.timestamp`` on assistant
  messages when the response arrived and on observations when the command finished: the tool duration is
  ``observation - assistant`` and the LLM latency ``assistant - previous message``, both ``measured``.
- Shared prefix: every program of a run starts with the same system prompt and the same opening of the task
  message (the instance template before the issue text). Its length is the longest common prefix, in
  characters, of all programs' ``system + task`` text, converted with the calibrated characters-per-token
  ratio of :mod:`collectors.tokens` (an estimate, capped at the smallest first prompt).
- ``resolved``: from ``results_summary.csv`` (``instance_id,resolved,...``) in the folder or its parent.
- Times: ``t_request_s`` / ``arrival_s`` are seconds since the first call of the collected run.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agentreplay.trace.taxonomy import classify_command
from collectors.base import BadInput, CollectResult, Skip, frames, per_file
from collectors.gaps import estimate_tool_durations, fit_seconds_per_token, program_gaps
from collectors.tokens import estimate_tokens

FORMATS = ("mini-swe-agent-1", "mini-swe-agent-1.1")
_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n?```", re.DOTALL)


@dataclass(slots=True)
class _Parsed:
    """One trajectory, parsed; durations of format -1 are filled in after the run-level fit."""

    program: dict
    turns: list[dict]
    stamps_s: list[float]
    prefix_text: str
    fmt: str
    measured: bool = field(default=False)

    @property
    def start_s(self) -> float:
        """When the program's first LLM call was sent (its first stamp, or the request before it)."""
        first = self.turns[0]["t_request_s"]
        return self.stamps_s[0] if first is None else min(first, self.stamps_s[0])


def _command(msg: dict) -> str | None:
    extra = msg.get("extra") or {}
    actions = extra.get("actions")
    if isinstance(actions, list) and actions:
        cmds = [a.get("command", "") for a in actions if isinstance(a, dict)]
        return "\n".join(c for c in cmds if c) or None
    content = msg.get("content")
    if isinstance(content, list):  # multimodal content blocks
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    m = _BLOCK.search(content or "")
    return m.group(1) if m else None


def _text(msg: dict) -> str:
    content = msg.get("content")
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content or ""


def _usage(msg: dict, i: int) -> tuple[dict, float | None]:
    extra = msg.get("extra") or {}
    resp = extra.get("response") or {}
    usage = resp.get("usage")
    if not isinstance(usage, dict) or "prompt_tokens" not in usage or "completion_tokens" not in usage:
        raise BadInput(f"messages[{i}]: assistant message without a usage block (extra.response.usage)")
    for k in ("prompt_tokens", "completion_tokens"):
        v = usage[k]
        if not isinstance(v, int) or v < 0:
            raise BadInput(f"messages[{i}]: usage.{k} = {v!r} is not a non-negative integer")
    created = resp.get("created")
    return usage, (float(created) if isinstance(created, int | float) else None)


def parse_file(path: Path) -> _Parsed:
    """Parse one ``.traj.json``; raises :class:`BadInput` with the reason when it cannot be used."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise BadInput("no 'messages' list")
    fmt = data.get("trajectory_format", "mini-swe-agent-1")
    if fmt not in FORMATS:
        raise BadInput(f"trajectory_format {fmt!r} not one of {FORMATS}")
    msgs = data["messages"]
    instance = data.get("instance_id") or path.name.removesuffix(".traj.json")
    asst = [i for i, m in enumerate(msgs) if isinstance(m, dict) and m.get("role") == "assistant"]
    if not asst:
        raise BadInput("empty trajectory: no assistant (LLM) messages")
    measured = fmt == "mini-swe-agent-1.1"
    turns: list[dict] = []
    stamps: list[float] = []
    model = None
    for t, i in enumerate(asst):
        msg = msgs[i]
        usage, created = _usage(msg, i)
        model = model or ((msg.get("extra") or {}).get("response") or {}).get("model")
        ts = (msg.get("extra") or {}).get("timestamp") if measured else created
        if not isinstance(ts, int | float):
            key = "extra.timestamp" if measured else "extra.response.created"
            raise BadInput(f"messages[{i}]: no {key} timestamp")
        if stamps and ts < stamps[-1]:
            raise BadInput(
                f"messages[{i}]: timestamp {ts} earlier than the previous call's {stamps[-1]} (non-monotonic)"
            )
        stamps.append(float(ts))
        cmd = _command(msg)
        prompt_details = usage.get("prompt_tokens_details") or {}
        completion_details = usage.get("completion_tokens_details") or {}
        row = {
            "turn_idx": t,
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
            "provider_cached_tokens": prompt_details.get("cached_tokens"),
            "reasoning_tokens": completion_details.get("reasoning_tokens"),
            "tokens_kind": "exact",
            "tool_class": classify_command(cmd),
            "tool_name": cmd.split()[0] if cmd and cmd.split() else None,
            "tool_duration_s": None,
            "tool_duration_kind": None,
            "llm_latency_s": None,
            "t_request_s": None,
            "t_response_s": None,
        }
        if measured:
            prev_ts = _prev_stamp(msgs, i)
            nxt = i + 1
            obs_ts = None
            while nxt < len(msgs) and msgs[nxt].get("role") in ("user", "tool"):
                v = (msgs[nxt].get("extra") or {}).get("timestamp")
                obs_ts = float(v) if isinstance(v, int | float) else obs_ts
                nxt += 1
            row["t_response_s"] = float(ts)
            if prev_ts is not None:
                if ts < prev_ts:
                    raise BadInput(f"messages[{i}]: response stamped before its request (non-monotonic)")
                row["t_request_s"], row["llm_latency_s"] = prev_ts, float(ts) - prev_ts
            if t < len(asst) - 1:
                if obs_ts is None:
                    raise BadInput(f"messages[{i}]: observation without extra.timestamp")
                if obs_ts < ts:
                    raise BadInput(f"messages[{i}]: observation stamped before its command was issued")
                row["tool_duration_s"], row["tool_duration_kind"] = obs_ts - float(ts), "measured"
        else:
            row["t_request_s"] = float(ts)
        turns.append(row)
    prev_ctx = None
    for row in turns:
        row["reused_tokens"] = 0 if prev_ctx is None else min(prev_ctx, row["input_tokens"])
        reasoning = row["reasoning_tokens"] or 0
        prev_ctx = row["input_tokens"] + (row["output_tokens"] if reasoning == 0 else 0)
    system = next((_text(m) for m in msgs if m.get("role") == "system"), "")
    task = next((_text(m) for m in msgs if m.get("role") == "user"), "")
    program = {
        "program_id": f"mini-swe-agent/{instance}",
        "source": "mini-swe-agent",
        "task_id": instance,
        "agent": "mini-swe-agent",
        "model": model or ((data.get("info") or {}).get("config") or {}).get("model", {}).get("model_name", ""),
        "n_turns": len(turns),
        "resolved": None,
        "arrival_s": None,
    }
    return _Parsed(program, turns, stamps, system + "\n" + task, fmt, measured)


def _prev_stamp(msgs: list[dict], i: int) -> float | None:
    for j in range(i - 1, -1, -1):
        v = (msgs[j].get("extra") or {}).get("timestamp")
        if isinstance(v, int | float):
            return float(v)
    return None


def _resolved_map(root: Path) -> dict[str, bool]:
    for d in (root, root.parent):
        f = d / "results_summary.csv"
        if f.is_file():
            with f.open(newline="") as fh:
                return {r["instance_id"]: r["resolved"].strip().lower() == "true" for r in csv.DictReader(fh)}
    return {}


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(path.glob("**/*.traj.json"))


class MiniSweAgentCollector:
    name = "mini-swe-agent"
    description = "mini-swe-agent *.traj.json (formats mini-swe-agent-1 and -1.1), e.g. SWE-bench Verified runs"

    def detect(self, path: Path) -> bool:
        if path.is_file():
            return path.name.endswith(".traj.json") and '"messages"' in path.read_text(errors="replace")[:200_000]
        return (
            next(iter(path.glob("*/*.traj.json")), None) is not None
            or next(iter(path.glob("*.traj.json")), None) is not None
        )

    def collect(self, path: Path) -> CollectResult:
        root = path if path.is_dir() else path.parent
        skips: list[Skip] = []
        files = _files(path)
        parsed = [p for _, p in per_file(files, parse_file, skips)]
        notes: list[str] = []
        if not parsed:
            return CollectResult(frames([], [], None), self.name, 0, skips, notes)
        self._fill_estimated_durations(parsed, notes)
        resolved = _resolved_map(root)
        prefix = (
            os.path.commonprefix([p.prefix_text for p in parsed])
            if len(parsed) > 1
            else parsed[0].prefix_text.split("\n", 1)[0]
        )
        min_first = min(p.turns[0]["input_tokens"] for p in parsed)
        prefix_tokens = min(estimate_tokens(prefix), min_first)
        prefix_id = "mini-swe-agent/" + hashlib.sha1(prefix.encode()).hexdigest()[:12]
        notes.append(
            f"shared prefix: {len(prefix)} characters common to all programs' system + task text, "
            f"estimated {prefix_tokens} tokens"
        )
        t0 = min(p.start_s for p in parsed)
        programs, turns = [], []
        for p in parsed:
            prog = dict(p.program)
            prog["resolved"] = resolved.get(prog["task_id"])
            prog["arrival_s"] = p.start_s - t0
            prog["shared_prefix_id"] = prefix_id
            prog["shared_prefix_tokens"] = prefix_tokens
            programs.append(prog)
            for row in p.turns:
                r = dict(row, program_id=prog["program_id"])
                for k in ("t_request_s", "t_response_s"):
                    if r[k] is not None:
                        r[k] = r[k] - t0
                turns.append(r)
        return CollectResult(frames(programs, turns, None), self.name, len(parsed), skips, notes)

    @staticmethod
    def _fill_estimated_durations(parsed: list[_Parsed], notes: list[str]) -> None:
        est = [p for p in parsed if not p.measured]
        if not est:
            return
        pairs = [program_gaps(p.stamps_s, [t["output_tokens"] for t in p.turns]) for p in est]
        gaps = np.concatenate([g for g, _ in pairs]) if pairs else np.empty(0)
        outs = np.concatenate([o for _, o in pairs]) if pairs else np.empty(0)
        spt = fit_seconds_per_token(gaps, outs)
        notes.append(
            f"tool durations estimated from call gaps: {spt * 1000:.2f} ms per output token "
            f"(5th percentile of gap/output over {len(gaps)} gaps)"
        )
        for p in est:
            durations = estimate_tool_durations(p.stamps_s, [t["output_tokens"] for t in p.turns], spt)
            for row, d in zip(p.turns, durations, strict=True):
                row["tool_duration_s"] = d
                row["tool_duration_kind"] = None if d is None else "estimated"
