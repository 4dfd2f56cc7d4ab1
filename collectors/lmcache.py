"""Collector for LMCache agent traces (``LMCache/lmcache-agent-trace``, e.g. its ``miniswe/`` folder).

Native format: ``*.jsonl`` files (a folder of them, or one file), one request per line:
``{"timestamp": <int, microseconds, request time>, "input": <whole prompt as flattened text>,
"output": <response text>, "session_id": <str>}``. Lines are not in time order. The serving model is not
recorded (``model = "unknown"``), the agent is mini-swe-agent, ``resolved`` is unknown (null).

- One program per ``session_id`` (``program_id = "lmcache/<session_id>"``), gathered over all files; its
  requests sorted by timestamp (ties keep file order) are its turns.
- Tokens are estimated from text (:func:`collectors.tokens.estimate_tokens`, ``tokens_kind = "estimated"``):
  ``input_tokens`` from ``input``, ``output_tokens`` from ``output``.
- ``reused_tokens`` is the prefix-cache-relevant reuse: the estimated tokens of ``input[:lcp]``, where ``lcp``
  is the length in characters of the longest common prefix of this prompt and the session's previous prompt,
  capped at ``input_tokens``. The flattened prompts do not contain the previous responses (in ``miniswe/``
  none of the 382 consecutive pairs has the previous thought in the next prompt: each prompt is the previous
  one plus the new observation), so "previous input + output" would overstate what an engine's prefix cache
  can match, and ``input_tokens`` understate the agent's real prompt by the responses. A note reports the
  mean ``lcp / len(previous prompt)`` (1.0 = strictly append-only prompts).
- Times: ``t_request_s`` is the request stamp in seconds since the earliest request of the collected input
  (the schema's "first event of the source run", as for mini-swe-agent), so a program's ``arrival_s`` equals
  its first turn's ``t_request_s``.
- ``tool_duration_s`` is estimated by :mod:`collectors.gaps` (``stamp="request"``: gap between consecutive
  request stamps minus the call's estimated generation time, one seconds-per-token fit over all sessions of
  the collect), ``tool_duration_kind = "estimated"``; null for the last turn.
- Tool: the bash command of the response (mini-swe-agent's single fenced ```` ```bash ```` block) classified
  by :func:`~agentreplay.trace.taxonomy.classify_command`; ``tool_name`` is its first word (null when the
  response has no command).
- Shared prefix: the longest common prefix of all sessions' first prompts, in estimated tokens, capped at the
  smallest first prompt; ``shared_prefix_id = "lmcache/miniswe"``.

Bad input: a line that is not JSON (e.g. truncated), misses a field, or has a non-integer timestamp makes the
*whole file* skip, with file and line number in the reason: a session with a request missing would break the
prefix chain and the gaps that the durations are estimated from. For the same reason a session that also had
lines in a skipped file (before its bad line) is dropped from the good files too, with a note.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentreplay.trace.taxonomy import classify_command
from collectors.base import BadInput, CollectResult, Skip, frames, per_file, turn_row
from collectors.gaps import estimate_tool_durations, fit_seconds_per_token, program_gaps
from collectors.tokens import estimate_tokens

FIELDS = ("timestamp", "input", "output", "session_id")
PREFIX_ID = "lmcache/miniswe"
_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n?```", re.DOTALL)


@dataclass(frozen=True, slots=True)
class _Request:
    session_id: str
    timestamp: int
    input: str
    output: str
    order: tuple[str, int]  # (file, line) for stable tie-breaking


def bash_command(output: str) -> str | None:
    """The command of the first fenced bash block of a mini-swe-agent response, or None."""
    m = _BLOCK.search(output or "")
    return m.group(1) if m else None


def parse_file(path: Path, touched: dict[str, set[str]] | None = None) -> list[_Request]:
    """All requests of one ``.jsonl`` file; :class:`BadInput` (with the line number) if any line is bad.

    ``touched[str(path)]`` collects the session ids read before a bad line, so the caller can drop them.
    """
    seen: set[str] = set()
    if touched is not None:
        touched[str(path)] = seen
    out: list[_Request] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise BadInput(f"line {n}: not valid JSON ({exc})") from exc
            if not isinstance(obj, dict):
                raise BadInput(f"line {n}: not a JSON object")
            missing = [f for f in FIELDS if f not in obj]
            if missing:
                raise BadInput(f"line {n}: missing field(s) {missing}")
            ts = obj["timestamp"]
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise BadInput(f"line {n}: timestamp {ts!r} is not a non-negative integer (microseconds)")
            for f in ("input", "output"):
                if not isinstance(obj[f], str):
                    raise BadInput(f"line {n}: {f!r} is not a string")
            sid = str(obj["session_id"])
            seen.add(sid)
            out.append(_Request(sid, ts, obj["input"], obj["output"], (str(path), n)))
    if not out:
        raise BadInput("empty file: no requests")
    return out


def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(path.glob("*.jsonl"))


def _first_line_is_lmcache(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            line = fh.readline(8 << 20)
        obj = json.loads(line)
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and all(f in obj for f in FIELDS)


class LMCacheCollector:
    name = "lmcache"
    description = "LMCache agent traces: *.jsonl of {timestamp, input, output, session_id} (prompt text)"

    def detect(self, path: Path) -> bool:
        if path.is_file():
            return path.suffix == ".jsonl" and _first_line_is_lmcache(path)
        first = next(iter(_files(path)), None)
        return first is not None and _first_line_is_lmcache(first)

    def collect(self, path: Path) -> CollectResult:
        skips: list[Skip] = []
        notes: list[str] = []
        touched: dict[str, set[str]] = {}
        files = _files(path)
        read = list(per_file(files, lambda p: parse_file(p, touched), skips))
        sessions: dict[str, list[_Request]] = {}
        for _, reqs in read:
            for r in reqs:
                sessions.setdefault(r.session_id, []).append(r)
        partial = set().union(*(touched.get(s.path, set()) for s in skips)) & sessions.keys()
        for sid in sorted(partial):
            del sessions[sid]
            notes.append(f"session {sid}: dropped, it also has lines in a skipped file")
        if not sessions:
            return CollectResult(frames([], [], None), self.name, len(read), skips, notes)
        multi = sum(len({r.order[0] for r in reqs}) > 1 for reqs in sessions.values())
        if multi:
            notes.append(f"{multi} session(s) span several files")
        for reqs in sessions.values():
            reqs.sort(key=lambda r: (r.timestamp, r.order))
        t0 = min(reqs[0].timestamp for reqs in sessions.values())
        order = sorted(sessions, key=lambda s: (sessions[s][0].timestamp, s))
        built = {sid: self._turns(sessions[sid], t0) for sid in order}
        self._fill_durations(built, notes)
        ratios = [r for _, rs in built.values() for r in rs]
        if ratios:
            notes.append(
                f"prompt reuse: mean lcp / previous prompt length {np.mean(ratios):.4f} over "
                f"{len(ratios)} consecutive pairs ({sum(r == 1.0 for r in ratios)} strictly append-only)"
            )
        firsts = [sessions[sid][0].input for sid in order]
        prefix = os.path.commonprefix(firsts) if len(firsts) > 1 else ""
        prefix_tokens = min(estimate_tokens(prefix), min(estimate_tokens(f) for f in firsts))
        notes.append(
            f"shared prefix: {len(prefix)} characters common to all {len(firsts)} sessions' first "
            f"prompts, estimated {prefix_tokens} tokens"
        )
        programs, turns = [], []
        for sid in order:
            rows, _ = built[sid]
            pid = f"lmcache/{sid}"
            programs.append(
                {
                    "program_id": pid,
                    "source": "lmcache",
                    "task_id": sid,
                    "agent": "mini-swe-agent",
                    "model": "unknown",
                    "n_turns": len(rows),
                    "resolved": None,
                    "arrival_s": rows[0]["t_request_s"],
                    "shared_prefix_id": PREFIX_ID,
                    "shared_prefix_tokens": prefix_tokens,
                }
            )
            turns += [dict(r, program_id=pid) for r in rows]
        return CollectResult(frames(programs, turns, None), self.name, len(read), skips, notes)

    @staticmethod
    def _turns(reqs: list[_Request], t0: int) -> tuple[list[dict], list[float]]:
        rows: list[dict] = []
        ratios: list[float] = []
        prev: str | None = None
        for i, r in enumerate(reqs):
            inp = estimate_tokens(r.input)
            if prev is None:
                reused = 0
            else:
                lcp = len(os.path.commonprefix([prev, r.input]))
                reused = min(estimate_tokens(r.input[:lcp]), inp)
                ratios.append(lcp / len(prev) if prev else 1.0)
            cmd = bash_command(r.output)
            words = cmd.split() if cmd else []
            rows.append(
                turn_row(
                    turn_idx=i,
                    input_tokens=inp,
                    output_tokens=estimate_tokens(r.output),
                    reused_tokens=reused,
                    tokens_kind="estimated",
                    tool_class=classify_command(cmd),
                    tool_name=words[0] if words else None,
                    t_request_s=(r.timestamp - t0) / 1e6,
                )
            )
            prev = r.input
        return rows, ratios

    @staticmethod
    def _fill_durations(built: dict[str, tuple[list[dict], list[float]]], notes: list[str]) -> None:
        pairs = [
            program_gaps([t["t_request_s"] for t in rows], [t["output_tokens"] for t in rows])
            for rows, _ in built.values()
        ]
        gaps = np.concatenate([g for g, _ in pairs])
        outs = np.concatenate([o for _, o in pairs])
        spt = fit_seconds_per_token(gaps, outs)
        notes.append(
            f"tool durations estimated from request gaps: {spt * 1000:.2f} ms per output token "
            f"(5th percentile of gap/output over {len(gaps)} gaps)"
        )
        for rows, _ in built.values():
            stamps = [t["t_request_s"] for t in rows]
            durations = estimate_tool_durations(stamps, [t["output_tokens"] for t in rows], spt)
            for row, d in zip(rows, durations, strict=True):
                row["tool_duration_s"] = d
                row["tool_duration_kind"] = None if d is None else "estimated"
