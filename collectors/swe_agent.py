"""Collector for SWE-agent runs: SWE-agent 1.x ``*.traj`` files and SWE-smith / Continuum trace files.

Both inputs log text but no per-call token counts, and both log the *measured* wall time of every tool call,
so turns carry ``tokens_kind = "estimated"`` (:func:`collectors.tokens.estimate_tokens`, sums of per-message
estimates) and ``tool_duration_kind = "measured"``. No timestamps are logged: ``t_*_s``, ``arrival_s`` and
``llm_latency_s`` stay null.

**SWE-agent 1.x ``.traj``** (a file, or a folder searched recursively for ``*.traj``), as written by
``DefaultAgent.save_trajectory``: ``{"trajectory": [step...], "history": [message...], "info": {...},
"replay_config": <JSON string or object>, "environment": <env name>}``. A step is ``{action, observation,
response, thought, execution_time (s, the tool's wall time), state, query (1.x: the messages sent for this
step), extra_info}``; ``info.model_stats`` holds ``tokens_sent`` / ``tokens_received`` / ``api_calls``.

- One turn per step. ``input_tokens``: the step's ``query`` messages when logged (content text plus tool-call
  name and arguments, per message). Without ``query`` (0.x files) the prompt is rebuilt append-only: the
  history messages before the first non-demo assistant message (system, demonstrations, instance), then each
  previous step's thought + action and observation (without the observation template's wrapper text).
- ``output_tokens``: ``thought + action`` (``response`` when both are empty).
- ``reused_tokens``: ``min(previous input + previous output, input)``; when both steps log ``query`` and the
  previous query is not a message-level prefix of this one (a history processor elided old observations),
  only the leading identical messages count.
- ``tool_name``: first word of the action. SWE-agent tools (``str_replace_editor <sub-command>``, ``submit``,
  ``find_file``, ``search_dir``, ``open``, ``edit``...) are classified by name with
  :func:`~agentreplay.trace.taxonomy.classify_tool` (the editor by its sub-command); anything else is a shell
  command for :func:`~agentreplay.trace.taxonomy.classify_command`.
- ``tool_duration_s``: the step's ``execution_time`` (null for the last turn); every step's action also goes to
  the ``tool_calls`` table. ``info.model_stats.tokens_sent`` is only compared (in a note), never used.
- ``program_id = "swe-agent/<instance>"``; the instance is ``replay_config.problem_statement.id``, else the
  file name without ``.traj``. Model: ``replay_config.agent.model.name`` or ``"unknown"``; ``resolved`` is not
  in a ``.traj`` (``exit_status`` says "submitted", not "resolved"): null.

**SWE-smith / Continuum** ``test.json``: a JSON list of ``{messages, instance_id, resolved, model, traj_id,
patch}``; ``messages`` is a JSON-encoded *string* of SWE-agent's OpenAI tool-calling history, whose
assistant ``tool_calls[]`` carry ``execution_time_seconds`` (re-measured by replay).

- One program per object (``swe-smith/<traj_id or instance_id>``), one turn per assistant message.
  ``input_tokens``: all messages before it (append-only, so ``reused_tokens`` is exactly previous input +
  previous output); ``output_tokens``: its content + tool-call arguments.
- ``tool_duration_s``: the *sum* of the message's calls' ``execution_time_seconds`` (SWE-agent executes the
  calls of one response one after another); a message without calls ran nothing: 0. Null for the last turn.
  The turn's tool is its highest-priority call (:data:`~agentreplay.trace.taxonomy.PRIORITY`).
  ``tool_calls`` gets one row per call with its own measured time, ``start_s`` null.
- A bad object is skipped (``test.json[3]: reason``) while the other objects ingest.

Shared prefix (both inputs): the system message, in estimated tokens (capped at the first prompt);
``shared_prefix_id`` ``swe-agent/system`` or ``swe-smith/system``, with a hash suffix when one collect sees
several different system messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentreplay.trace.taxonomy import PRIORITY, classify_command, classify_tool
from collectors.base import BadInput, CollectResult, Skip, frames, per_file, turn_row
from collectors.tokens import estimate_tokens

_SWE_TOOLS = frozenset(
    {
        "str_replace_editor",
        "submit",
        "find_file",
        "search_dir",
        "search_file",
        "open",
        "goto",
        "scroll_up",
        "scroll_down",
        "create",
        "edit",
        "insert",
        "filemap",
        "view_image",
    }
)
_EDITORS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "file_editor"})
_SNIFF_BYTES = 1 << 20


@dataclass(slots=True)
class _Program:
    program: dict
    turns: list[dict]
    calls: list[dict]
    system: str
    stats: dict = field(default_factory=dict)


def _text(content: object) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return content if isinstance(content, str) else ""


def _message_text(msg: dict) -> str:
    parts = [_text(msg.get("content"))]
    for tc in msg.get("tool_calls") or []:
        fn = (tc.get("function") or {}) if isinstance(tc, dict) else {}
        args = fn.get("arguments", "")
        parts += [str(fn.get("name") or ""), args if isinstance(args, str) else json.dumps(args)]
    return "".join(parts)


def _message_tokens(msgs: list[dict]) -> int:
    return sum(estimate_tokens(_message_text(m)) for m in msgs)


def classify_action(action: str | None) -> tuple[str | None, str]:
    """``(tool_name, tool_class)`` of a SWE-agent action line (a SWE-agent tool call or a shell command)."""
    words = (action or "").split()
    if not words:
        return None, "other"
    name = words[0]
    if name in _SWE_TOOLS or name in _EDITORS:
        return name, classify_tool(name, words[1] if len(words) > 1 and name in _EDITORS else None)
    return name, classify_command(action)


def _number(v: object, where: str, *, required: bool) -> float | None:
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise BadInput(f"{where} = {v!r} is not a number")
    if v < 0:
        raise BadInput(f"{where} = {v} is negative")
    return float(v)


def _obj(v: object) -> dict:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {}
    return v if isinstance(v, dict) else {}


def parse_traj(path: Path) -> _Program:
    """Parse one SWE-agent ``.traj``; :class:`BadInput` says why it cannot be used."""
    raw = path.read_text(encoding="utf-8")
    if not raw.strip():
        raise BadInput("empty file")
    data = json.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("trajectory"), list):
        raise BadInput("no 'trajectory' list")
    steps = data["trajectory"]
    if not steps:
        raise BadInput("zero steps in 'trajectory'")
    history = [m for m in data.get("history") or [] if isinstance(m, dict)]
    main = history[0].get("agent") if history else None
    history = [m for m in history if m.get("agent", main) == main]
    first = next(
        (i for i, m in enumerate(history) if m.get("role") == "assistant" and not m.get("is_demo")), len(history)
    )
    initial = history[:first]
    system = next((_text(m.get("content")) for m in history if m.get("role") == "system"), "")
    turns, calls = [], []
    prev_in = prev_out = 0
    prev_query: list[dict] | None = None
    rebuilt = _message_tokens(initial)  # append-only context when a step logs no query
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise BadInput(f"trajectory[{i}] is not an object")
        last = i == len(steps) - 1
        exec_s = _number(step.get("execution_time"), f"trajectory[{i}].execution_time", required=not last)
        query = step.get("query")
        query = [m for m in query if isinstance(m, dict)] if isinstance(query, list) else None
        if query and not system and query[0].get("role") == "system":
            system = _text(query[0].get("content"))
        if not query and not initial and i == 0:
            raise BadInput("no prompt: neither 'history' messages before the first step nor a step 'query'")
        thought, action = str(step.get("thought") or ""), str(step.get("action") or "")
        input_tokens = _message_tokens(query) if query else rebuilt
        output_tokens = estimate_tokens("\n".join(x for x in (thought, action) if x) or str(step.get("response") or ""))
        reused = 0 if i == 0 else min(prev_in + prev_out, input_tokens)
        if query and prev_query and not _is_prefix(prev_query, query):
            k = 0
            while k < min(len(prev_query), len(query)) and _message_text(prev_query[k]) == _message_text(query[k]):
                k += 1
            reused = min(_message_tokens(prev_query[:k]), input_tokens)
        name, cls = classify_action(action)
        turns.append(_turn(i, input_tokens, output_tokens, reused, cls, name, None if last else exec_s))
        if exec_s is not None:
            calls.append(_call(i, i, name, cls, exec_s))
        rebuilt = input_tokens + output_tokens + estimate_tokens(str(step.get("observation") or ""))
        prev_in, prev_out, prev_query = input_tokens, output_tokens, query
    replay = _obj(data.get("replay_config"))
    instance = str(_obj(replay.get("problem_statement")).get("id") or path.name.removesuffix(".traj"))
    model = _obj(_obj(replay.get("agent")).get("model")).get("name") or "unknown"
    program = _program(f"swe-agent/{instance}", "swe-agent", instance, str(model), len(turns), None)
    stats = _obj(_obj(data.get("info")).get("model_stats"))
    return _Program(program, turns, calls, system, stats)


def _is_prefix(a: list[dict], b: list[dict]) -> bool:
    return len(a) <= len(b) and all(_message_text(x) == _message_text(y) for x, y in zip(a, b, strict=False))


def _turn(i: int, inp: int, out: int, reused: int, cls: str, name: str | None, dur: float | None) -> dict:
    return turn_row(
        turn_idx=i,
        input_tokens=inp,
        output_tokens=out,
        reused_tokens=reused,
        tokens_kind="estimated",
        tool_class=cls,
        tool_name=name,
        tool_duration_s=dur,
        tool_duration_kind=None if dur is None else "measured",
    )


def _call(call_idx: int, turn_idx: int, name: str | None, cls: str, dur: float) -> dict:
    return {
        "call_idx": call_idx,
        "turn_idx": turn_idx,
        "tool_name": name or "",
        "tool_class": cls,
        "start_s": None,
        "duration_s": dur,
        "duration_kind": "measured",
    }


def _program(pid: str, source: str, task: str, model: str, n: int, resolved: bool | None) -> dict:
    return {
        "program_id": pid,
        "source": source,
        "task_id": task,
        "agent": "swe-agent",
        "model": model,
        "n_turns": n,
        "resolved": resolved,
        "arrival_s": None,
    }


def parse_swe_smith_object(obj: object) -> _Program:
    """Parse one element of a SWE-smith / Continuum ``test.json`` list."""
    if not isinstance(obj, dict):
        raise BadInput("not an object")
    for key in ("messages", "instance_id"):
        if key not in obj:
            raise BadInput(f"no {key!r}")
    msgs = json.loads(obj["messages"]) if isinstance(obj["messages"], str) else obj["messages"]
    if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
        raise BadInput("'messages' is not a list of message objects")
    asst = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
    if not asst:
        raise BadInput("zero assistant messages")
    tokens = [estimate_tokens(_message_text(m)) for m in msgs]
    turns, calls = [], []
    prev_in = prev_out = 0
    for t, i in enumerate(asst):
        tcs = msgs[i].get("tool_calls") or []
        if not isinstance(tcs, list):
            raise BadInput(f"messages[{i}].tool_calls is not a list")
        best: tuple[int, str | None, str] = (len(PRIORITY), None, "other")
        total = 0.0
        for k, tc in enumerate(tcs):
            fn = (tc.get("function") if isinstance(tc, dict) else None) or {}
            where = f"messages[{i}].tool_calls[{k}].execution_time_seconds"
            dur = _number(tc.get("execution_time_seconds") if isinstance(tc, dict) else None, where, required=True)
            name = str(fn.get("name") or "")
            args = _obj(fn.get("arguments"))
            cls = classify_tool(name, args.get("command") if isinstance(args.get("command"), str) else None)
            calls.append(_call(len(calls), t, name, cls, dur))
            total += dur
            best = min(best, (PRIORITY.index(cls), name, cls), key=lambda x: x[0])
        inp, out = sum(tokens[:i]), tokens[i]
        last = t == len(asst) - 1
        turns.append(
            _turn(t, inp, out, 0 if t == 0 else min(prev_in + prev_out, inp), best[2], best[1], None if last else total)
        )
        prev_in, prev_out = inp, out
    task = str(obj["instance_id"])
    pid = f"swe-smith/{obj.get('traj_id') or task}"
    resolved = obj.get("resolved") if isinstance(obj.get("resolved"), bool) else None
    program = _program(pid, "swe-smith", task, str(obj.get("model") or "unknown"), len(turns), resolved)
    system = next((_text(m.get("content")) for m in msgs if m.get("role") == "system"), "")
    return _Program(program, turns, calls, system)


def parse_swe_smith(path: Path) -> tuple[list[_Program], list[Skip]]:
    """Parse a ``test.json`` list; bad elements become skips naming ``<file>[index]``."""
    raw = path.read_text(encoding="utf-8")
    if not raw.strip():
        raise BadInput("empty file")
    data = json.loads(raw)
    if not isinstance(data, list):
        raise BadInput("not a JSON list")
    if not data:
        raise BadInput("empty list: zero trajectories")
    out, skips = [], []
    for i, obj in enumerate(data):
        try:
            out.append(parse_swe_smith_object(obj))
        except (BadInput, ValueError, TypeError, AttributeError) as exc:
            reason = str(exc) if isinstance(exc, BadInput) else f"{type(exc).__name__}: {exc}"
            skips.append(Skip(str(path), f"{path.name}[{i}]: {reason}"))
    return out, skips


def _is_swe_smith(path: Path) -> bool:
    """Cheap sniff: a JSON list whose first element has ``messages`` and ``instance_id``."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    body = head.lstrip()
    if not body.startswith("["):
        return False
    try:
        first, _ = json.JSONDecoder().raw_decode(body[1:].lstrip())
        return isinstance(first, dict) and "messages" in first and "instance_id" in first
    except ValueError:  # first element longer than the sniffed bytes
        return body[1:].lstrip().startswith("{") and '"messages"' in head and '"instance_id"' in head


def _files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    yield from sorted(path.rglob("*.traj"))
    yield from (p for p in sorted(path.rglob("*.json")) if _is_swe_smith(p))


class SweAgentCollector:
    name = "swe-agent"
    description = "SWE-agent 1.x *.traj files and SWE-smith / Continuum test.json (measured tool times)"

    def detect(self, path: Path) -> bool:
        if path.is_file():
            return path.suffix == ".traj" or (path.suffix == ".json" and _is_swe_smith(path))
        if next(iter(path.rglob("*.traj")), None) is not None:
            return True
        return any(_is_swe_smith(p) for p in sorted(path.glob("*.json")))

    def collect(self, path: Path) -> CollectResult:
        skips: list[Skip] = []
        parsed: list[_Program] = []
        notes: list[str] = []

        def parse(p: Path) -> list[_Program]:
            if p.suffix == ".traj":
                return [parse_traj(p)]
            progs, obj_skips = parse_swe_smith(p)
            skips.extend(obj_skips)
            return progs

        n_files = 0
        for _, progs in per_file(_files(path), parse, skips):
            n_files += 1
            parsed.extend(progs)
        seen: dict[str, int] = {}
        for p in parsed:
            pid = p.program["program_id"]
            seen[pid] = seen.get(pid, 0) + 1
            if seen[pid] > 1:
                p.program["program_id"] = f"{pid}#{seen[pid]}"
                notes.append(f"{pid}: duplicate program id, renamed {p.program['program_id']}")
        self._prefixes(parsed, notes)
        self._stats_note(parsed, notes)
        programs, turns, calls = [], [], []
        for p in parsed:
            programs.append(p.program)
            pid = p.program["program_id"]
            turns += [dict(r, program_id=pid) for r in p.turns]
            calls += [dict(c, program_id=pid) for c in p.calls]
        if parsed:
            n_calls = len(calls)
            notes.append(
                f"tool durations measured: {n_calls} tool calls, {sum(c['duration_s'] for c in calls):.1f} s in all"
            )
        return CollectResult(frames(programs, turns, calls), self.name, n_files, skips, notes)

    @staticmethod
    def _prefixes(parsed: list[_Program], notes: list[str]) -> None:
        for source in sorted({p.program["source"] for p in parsed}):
            group = [p for p in parsed if p.program["source"] == source]
            distinct = {p.system for p in group}
            for p in group:
                suffix = "" if len(distinct) == 1 else "-" + hashlib.sha1(p.system.encode()).hexdigest()[:8]
                p.program["shared_prefix_id"] = f"{source}/system{suffix}" if p.system else None
                p.program["shared_prefix_tokens"] = min(estimate_tokens(p.system), p.turns[0]["input_tokens"])
            if len(distinct) > 1:
                notes.append(f"{source}: {len(distinct)} different system messages, one shared-prefix id each")

    @staticmethod
    def _stats_note(parsed: list[_Program], notes: list[str]) -> None:
        logged = [p for p in parsed if isinstance(p.stats.get("tokens_sent"), int | float)]
        if not logged:
            return
        sent = sum(p.stats["tokens_sent"] for p in logged)
        est = sum(t["input_tokens"] for p in logged for t in p.turns)
        recv = sum(p.stats.get("tokens_received") or 0 for p in logged)
        est_out = sum(t["output_tokens"] for p in logged for t in p.turns)
        calls = sum(p.stats.get("api_calls") or 0 for p in logged)
        ratio = f"{est / sent:.3f}" if sent else "n/a"
        notes.append(
            f"model_stats of {len(logged)} .traj file(s): tokens_sent {int(sent)} vs estimated input "
            f"{est} (ratio {ratio}); tokens_received {int(recv)} vs estimated output {est_out}; "
            f"api_calls {int(calls)} vs {sum(len(p.turns) for p in logged)} steps "
            "(estimates kept; model_stats not used)"
        )
