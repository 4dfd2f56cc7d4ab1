"""Collector for Claude Code session logs with exact tool timings (SWE-rebench runs, ``claude-code`` format).

Layout read: ``<root>/all_images_<variant>/<task>/attempt_<n>/{trace.jsonl,tool_calls.json}``. ``path`` may be
the root, a variant folder, a task folder or an attempt folder. ``variant`` is the variant folder's name without
the ``all_images_`` prefix (``haiku``: Claude Code + claude-3-5-haiku; ``local``: Claude Code against a local
llama.cpp server running GLM-4.7-Flash). Program ids are ``claude-code/<variant>/<task>`` (``/attempt_<n>`` is
appended for attempts other than ``attempt_1``).

``programs`` / ``turns`` come from ``trace.jsonl``, one program per readable file, so **a task without a
readable trace.jsonl has no program and no turns; its tool calls still go to ``tool_calls``** (with
``turn_idx`` null) and a note counts such tasks.

Turns. One turn per distinct assistant ``message.id`` in the main chain (``isSidechain`` false; sidechain lines
belong to ``Task`` sub-agents and are not calls of this program). Claude Code writes one line per content
block with the same id; they are merged. ``<synthetic>`` API-error messages (``isApiErrorMessage``) are not LLM
calls and are dropped (counted in a note).

- ``input_tokens`` = ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens`` (missing cache
  fields count 0; the local llama.cpp runs log none). ``provider_cached_tokens`` = ``cache_read_input_tokens``
  as logged, null when the field is absent.
- ``output_tokens``: a line's ``usage.output_tokens`` is final only once Claude Code has received the stream's
  ``message_delta``, which is also when it learns ``stop_reason``. Main-chain haiku lines are written per
  content block before that (``stop_reason`` null, ``output_tokens`` 1-5: the ``message_start`` placeholder; 794
  of 796 calls, logged/estimated about 0.03). The local runs carry ``stop_reason`` and plausible counts (5,630 of
  5,631 calls; logged / estimated median 0.84, p5-p95 0.70-1.02, the ratio expected from a different
  tokenizer). Rule: when the call's last line has a non-null ``stop_reason`` the logged count is used
  (``tokens_kind = "exact"``); otherwise the count is estimated with :func:`collectors.tokens.estimate_tokens`
  over thinking + text + JSON of the tool_use inputs (``tokens_kind = "estimated"``).
- ``reasoning_tokens``: null without thinking blocks; else the estimated tokens of the thinking text, scaled by
  logged / estimated output for exact calls (so it never exceeds ``output_tokens``).
- ``reused_tokens`` = ``min(previous input + previous output, input)``; 0 for turn 0.
- ``t_request_s`` = the latest main-chain line before the call's first line (the prompt or the last
  tool_result), ``t_response_s`` = the call's last line, both seconds after the program's first main-chain line.
  ``llm_latency_s = t_response_s - t_request_s`` (floored at 0): queueing + prefill + full decode, since the
  next request is sent as soon as the tool results are written.
- ``tool_name`` / ``tool_class``: the call's tool_use blocks (names joined by ``+`` in block order; the class of
  the highest :data:`~agentreplay.trace.taxonomy.PRIORITY` among them; ``Bash`` is classified by its command).
  A call without tool_use gets class ``other`` and a null name.
- ``tool_duration_s``: max(end) - min(start) over this call's tool_use ids found in ``tool_calls.json``
  (parallel calls overlap), ``measured``; if none is found (no or bad tool_calls.json), the gap from this
  response to the next request, floored at 0, ``estimated``; null for the last turn.

Shared prefix. ``shared_prefix_id = claude-code/<variant>``. ``shared_prefix_tokens`` is one value per variant:
if any program's first call read the prompt cache (the system prompt cached by an earlier program of the run),
the minimum positive first-call ``cache_read_input_tokens`` over the variant's programs (haiku: 10,900; the mode
is 11,174), i.e. a prefix the provider itself served to other programs. Otherwise (local: no cache accounting)
the minimum over the variant's programs of first-call input minus the estimated tokens of the first user
message. That fallback is an upper bound: it also counts Claude Code's per-repository environment / git status
section; on haiku it would give 14,148 instead of 10,900.

Tool calls. Every entry of every readable ``tool_calls.json`` becomes a row, in file order (``call_idx``), also
sidechain calls (``turn_idx`` null). ``duration_s = end_timestamp - timestamp`` exactly (ms resolution, always
``measured``); ``start_s`` is relative to the earliest ``timestamp`` in that file (in 20 files a later entry
starts up to 6.5 s before the first one, so the first entry would give negative starts).

Bad input (DESIGN §8), each reported as a skip of that file while the rest is ingested: invalid or truncated
JSON, an assistant line without usage, an entry whose ``end_timestamp`` precedes its ``timestamp``, a main-chain
line more than :data:`TIMESTAMP_JITTER_S` earlier than an earlier line, a trace without assistant calls.
A bad trace.jsonl leaves the task's tool calls in; a bad tool_calls.json leaves its turns with estimated gaps.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentreplay.trace.taxonomy import PRIORITY, classify_tool
from collectors.base import BadInput, CollectResult, Skip, frames, per_file
from collectors.tokens import estimate_tokens

#: Main-chain lines may be out of order by this much (parallel tool results are written up to 3 ms apart).
TIMESTAMP_JITTER_S = 1.0
TRACE_FILE = "trace.jsonl"
TOOLS_FILE = "tool_calls.json"
VARIANT_PREFIX = "all_images_"


def _ts(value: Any, where: str) -> datetime:
    """Parse an ISO-8601 stamp (``...Z``); naive stamps are taken as UTC."""
    if not isinstance(value, str):
        raise BadInput(f"{where}: missing or non-string timestamp {value!r}")
    try:
        t = datetime.fromisoformat(value)
    except ValueError as exc:
        raise BadInput(f"{where}: bad timestamp {value!r}") from exc
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _secs(a: datetime, b: datetime) -> float:
    """Seconds from ``b`` to ``a``."""
    return (a - b).total_seconds()


@dataclass
class _ToolEntry:
    id: str
    name: str
    command: str | None
    start: datetime
    end: datetime


@dataclass
class _Call:
    msg_id: str
    model: str
    request: datetime
    first: datetime
    last: datetime
    usage: dict[str, Any]
    stop_reason: str | None = None
    thinking: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    tools: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class _Session:
    t0: datetime
    calls: list[_Call]
    first_user_text: str
    n_synthetic: int


def _command(name: str, inp: Any) -> str | None:
    if name.lower() == "bash" and isinstance(inp, dict) and isinstance(inp.get("command"), str):
        return inp["command"]
    return None


def parse_tool_calls(path: Path) -> list[_ToolEntry]:
    """Entries of one ``tool_calls.json``; :class:`BadInput` on bad JSON, missing fields or end < start."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BadInput(f"invalid JSON (truncated?): {exc}") from exc
    if not isinstance(data, list):
        raise BadInput(f"expected a JSON list of tool calls, got {type(data).__name__}")
    out = []
    for i, e in enumerate(data):
        if not isinstance(e, dict):
            raise BadInput(f"entry {i}: not an object")
        missing = [k for k in ("id", "tool", "timestamp", "end_timestamp") if k not in e]
        if missing:
            raise BadInput(f"entry {i}: missing {missing}")
        start = _ts(e["timestamp"], f"entry {i} timestamp")
        end = _ts(e["end_timestamp"], f"entry {i} end_timestamp")
        if end < start:
            raise BadInput(
                f"entry {i} ({e['id']}): end_timestamp {e['end_timestamp']} before timestamp {e['timestamp']}"
            )
        name = str(e["tool"])
        out.append(_ToolEntry(str(e["id"]), name, _command(name, e.get("input")), start, end))
    return out


def _usage(msg: dict[str, Any], where: str) -> dict[str, Any]:
    usage = msg.get("usage")
    if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int):
        raise BadInput(f"{where}: assistant message {msg.get('id')!r} has no usage.input_tokens")
    for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"):
        v = usage.get(k)
        if v is not None and (not isinstance(v, int) or v < 0):
            raise BadInput(f"{where}: usage.{k} = {v!r} is not a non-negative integer")
    return usage


def parse_trace(path: Path) -> _Session:
    """Main-chain LLM calls of one ``trace.jsonl`` (see the module docstring); :class:`BadInput` if unusable."""
    calls: list[_Call] = []
    t0: datetime | None = None
    latest: datetime | None = None
    first_user = ""
    seen_user = False
    synthetic = 0
    with path.open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            where = f"line {n}"
            o = _main_chain_line(raw, where)
            if o is None:
                continue
            ts = _ts(o.get("timestamp"), where)
            if latest is not None and _secs(latest, ts) > TIMESTAMP_JITTER_S:
                raise BadInput(
                    f"{where}: non-monotonic timestamp {o['timestamp']} is {_secs(latest, ts):.3f} s "
                    "before an earlier line"
                )
            t0 = ts if t0 is None else t0
            msg = o.get("message")
            if not isinstance(msg, dict):
                raise BadInput(f"{where}: {o['type']} line without a message object")
            if o["type"] == "user":
                if not seen_user:
                    c = msg.get("content")
                    first_user = c if isinstance(c, str) else json.dumps(c, ensure_ascii=False)
                    seen_user = True
            elif msg.get("model") == "<synthetic>" or o.get("isApiErrorMessage"):
                synthetic += 1
            else:
                _add_assistant_line(calls, msg, where, latest or ts, ts)
            latest = ts if latest is None else max(latest, ts)
    if not calls or t0 is None:
        raise BadInput("no assistant LLM calls in the main (non-sidechain) chain")
    return _Session(t0, calls, first_user, synthetic)


def _main_chain_line(raw: str, where: str) -> dict[str, Any] | None:
    """One ``trace.jsonl`` line as an object when it is a main-chain user or assistant line, else None;
    :class:`BadInput` on invalid JSON."""
    try:
        o = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where}: invalid JSON (truncated?): {exc}") from exc
    if not isinstance(o, dict) or o.get("type") not in ("user", "assistant") or o.get("isSidechain"):
        return None
    return o


def _add_assistant_line(calls: list[_Call], msg: dict[str, Any], where: str, request: datetime, ts: datetime) -> None:
    """Merge one assistant line (``msg``, written at ``ts``) into its call: the last of ``calls`` when it has the
    same message id, else a new call requested at ``request``. A message id may not resume after another call."""
    mid = msg.get("id")
    if not isinstance(mid, str):
        raise BadInput(f"{where}: assistant message without an id")
    usage = _usage(msg, where)
    if not calls or calls[-1].msg_id != mid:
        if any(c.msg_id == mid for c in calls):
            raise BadInput(f"{where}: message {mid} resumes after another call")
        calls.append(_Call(mid, str(msg.get("model")), request, ts, ts, usage))
    call = calls[-1]
    call.last, call.usage, call.stop_reason = ts, usage, msg.get("stop_reason")
    content = msg.get("content")
    for b in content if isinstance(content, list) else []:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "thinking":
            call.thinking.append(str(b.get("thinking") or ""))
        elif kind == "text":
            call.text.append(str(b.get("text") or ""))
        elif kind == "tool_use":
            call.tools.append((str(b.get("id")), str(b.get("name")), b.get("input") or {}))


def _out_tokens(call: _Call) -> tuple[int, int | None, str]:
    """(output_tokens, reasoning_tokens, tokens_kind) of one call."""
    tool_json = [json.dumps(inp, ensure_ascii=False) for _, _, inp in call.tools]
    est_all = estimate_tokens("".join(call.thinking + call.text + tool_json))
    est_think = estimate_tokens("".join(call.thinking)) if call.thinking else None
    logged = call.usage.get("output_tokens")
    if call.stop_reason is not None and isinstance(logged, int):
        reasoning = None if est_think is None else min(logged, round(logged * est_think / max(est_all, 1)))
        return logged, reasoning, "exact"
    return est_all, None if est_think is None else min(est_think, est_all), "estimated"


def _turn_tools(call: _Call) -> tuple[str | None, str]:
    if not call.tools:
        return None, "other"
    classes = {classify_tool(name, _command(name, inp)) for _, name, inp in call.tools}
    return "+".join(name for _, name, _ in call.tools), next(c for c in PRIORITY if c in classes)


def _in_tokens(u: dict[str, Any]) -> int:
    return u["input_tokens"] + (u.get("cache_read_input_tokens") or 0) + (u.get("cache_creation_input_tokens") or 0)


def _shared_prefix(sessions: list[_Session]) -> int:
    """Shared system-prompt tokens of one variant (rule in the module docstring)."""
    hits = [s.calls[0].usage.get("cache_read_input_tokens") or 0 for s in sessions]
    if any(h > 0 for h in hits):
        return min(h for h in hits if h > 0)
    return max(0, min(_in_tokens(s.calls[0].usage) - estimate_tokens(s.first_user_text) for s in sessions))


def _turn_rows(pid: str, s: _Session, tools: dict[str, _ToolEntry] | None) -> list[dict]:
    rows: list[dict] = []
    prev_total = 0
    for i, call in enumerate(s.calls):
        inp = _in_tokens(call.usage)
        out, reasoning, kind = _out_tokens(call)
        name, cls = _turn_tools(call)
        duration: float | None = None
        dkind: str | None = None
        if i + 1 < len(s.calls):
            found = [tools[tid] for tid, _, _ in call.tools if tools and tid in tools]
            if found:
                duration = _secs(max(e.end for e in found), min(e.start for e in found))
                dkind = "measured"
            else:
                duration, dkind = max(0.0, _secs(s.calls[i + 1].request, call.last)), "estimated"
        rows.append(
            {
                "program_id": pid,
                "turn_idx": i,
                "input_tokens": inp,
                "output_tokens": out,
                "reused_tokens": 0 if i == 0 else min(prev_total, inp),
                "provider_cached_tokens": call.usage.get("cache_read_input_tokens"),
                "reasoning_tokens": reasoning,
                "tokens_kind": kind,
                "tool_class": cls,
                "tool_name": name,
                "tool_duration_s": duration,
                "tool_duration_kind": dkind,
                "llm_latency_s": max(0.0, _secs(call.last, call.request)),
                "t_request_s": _secs(call.request, s.t0),
                "t_response_s": _secs(call.last, s.t0),
            }
        )
        prev_total = inp + out
    return rows


def _attempt_dirs(path: Path) -> list[Path]:
    if path.is_file():
        return [path.parent] if path.name in (TRACE_FILE, TOOLS_FILE) else []
    if path.name.startswith("attempt_"):
        return [path]
    for pat in ("attempt_*", "*/attempt_*", "*/*/attempt_*"):
        found = sorted(d for d in path.glob(pat) if d.is_dir())
        if found:
            return found
    return []


def _ids(attempt: Path) -> tuple[str, str, str]:
    """(program_id, variant, task) of an attempt folder."""
    task = attempt.parent.name
    variant = attempt.parent.parent.name.removeprefix(VARIANT_PREFIX)
    suffix = "" if attempt.name == "attempt_1" else f"/{attempt.name}"
    return f"claude-code/{variant}/{task}{suffix}", variant, task


class ClaudeCodeCollector:
    """Claude Code ``trace.jsonl`` + ``tool_calls.json`` per task attempt (agentcgroup SWE-rebench runs)."""

    name = "claude-code"
    description = (
        "Claude Code sessions: <variant>/<task>/attempt_*/trace.jsonl (turns, token usage) and "
        "tool_calls.json (exact tool start/end times)"
    )

    def detect(self, path: Path) -> bool:
        p = Path(path)
        if not p.is_dir():
            return False
        pats = ["attempt_*/{f}", "*/attempt_*/{f}", "*/*/attempt_*/{f}"]
        if p.name.startswith("attempt_"):
            pats.insert(0, "{f}")
        return any(next(p.glob(pat.format(f=f)), None) is not None for pat in pats for f in (TOOLS_FILE, TRACE_FILE))

    def collect(self, path: Path) -> CollectResult:
        attempts = _attempt_dirs(Path(path))
        skips: list[Skip] = []
        tool_files = [a / TOOLS_FILE for a in attempts if (a / TOOLS_FILE).is_file()]
        trace_files = [a / TRACE_FILE for a in attempts if (a / TRACE_FILE).is_file()]
        tools = {p.parent: entries for p, entries in per_file(tool_files, parse_tool_calls, skips)}
        sessions = {p.parent: s for p, s in per_file(trace_files, parse_trace, skips)}

        by_variant: dict[str, list[_Session]] = {}
        for a, s in sessions.items():
            by_variant.setdefault(_ids(a)[1], []).append(s)
        prefix = {v: _shared_prefix(ss) for v, ss in by_variant.items()}

        programs, turns, tool_rows = [], [], []
        for a in attempts:
            pid, variant, task = _ids(a)
            entries = tools.get(a)
            s = sessions.get(a)
            turn_of: dict[str, int] = {}
            if s is not None:
                for i, call in enumerate(s.calls):
                    turn_of.update((tid, i) for tid, _, _ in call.tools)
                model = Counter(c.model for c in s.calls).most_common(1)[0][0]
                programs.append(
                    {
                        "program_id": pid,
                        "source": "claude-code",
                        "task_id": task,
                        "agent": "claude-code",
                        "model": model,
                        "n_turns": len(s.calls),
                        "resolved": None,
                        "arrival_s": None,
                        "shared_prefix_id": f"claude-code/{variant}",
                        "shared_prefix_tokens": prefix[variant],
                    }
                )
                turns.extend(_turn_rows(pid, s, None if entries is None else {e.id: e for e in entries}))
            if entries:
                origin = min(e.start for e in entries)
                tool_rows.extend(
                    {
                        "program_id": pid,
                        "call_idx": k,
                        "turn_idx": turn_of.get(e.id),
                        "tool_name": e.name,
                        "tool_class": classify_tool(e.name, e.command),
                        "start_s": _secs(e.start, origin),
                        "duration_s": _secs(e.end, e.start),
                        "duration_kind": "measured",
                    }
                    for k, e in enumerate(entries)
                )

        notes = []
        only_tools = [a for a in tools if a not in sessions]
        if only_tools:
            n = sum(len(tools[a]) for a in only_tools)
            notes.append(
                f"{len(only_tools)} task(s) have tool_calls.json but no readable trace.jsonl: their {n} "
                "tool calls are in tool_calls only (no program, no turns)"
            )
        only_trace = [a for a in sessions if a not in tools]
        if only_trace:
            notes.append(
                f"{len(only_trace)} program(s) have no readable tool_calls.json: their tool gaps are "
                "estimated from timestamps"
            )
        synthetic = sum(s.n_synthetic for s in sessions.values())
        if synthetic:
            notes.append(f"{synthetic} synthetic API-error message(s) dropped (not LLM calls)")
        kinds = Counter(r["tokens_kind"] for r in turns)
        notes.append(
            f"output tokens: {kinds.get('exact', 0)} logged (final), {kinds.get('estimated', 0)} "
            "estimated from text (streaming placeholders)"
        )
        trace = frames(programs, turns, tool_rows)
        if trace.tool_calls is not None:
            trace.tool_calls["turn_idx"] = trace.tool_calls["turn_idx"].astype("Int32")
        return CollectResult(
            trace=trace, fmt=self.name, files_read=len(tools) + len(sessions), skips=skips, notes=notes
        )
