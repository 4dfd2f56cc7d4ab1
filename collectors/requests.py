"""What the request-level trace collectors share (Splitwise, Azure LLM inference, Mooncake, LLMServingSim).

A request-level trace is a list of stateless LLM requests with arrival times and token counts, no agent and no
tool calls. Each request becomes a one-turn program (``n_turns = 1``): ``program_id = "<source>/<file stem>/
<line>"`` (the line of the native file, header = line 1), ``agent = "none"``, ``task_id`` the file stem and line,
``tool_class = "other"`` with no tool (the program ends with its request), ``tokens_kind = "exact"``,
``reused_tokens = 0``, ``arrival_s`` = ``t_request_s`` = seconds since the earliest request of the collected
input. ``simulate`` recognises such a trace (one request per program) and reports per request (E2E, TTFT, TPOT,
requests/s).

Bad input: a row with a missing, non-numeric, negative or non-finite field makes the whole file skip with the
line, field and value in the reason (a trace with holes would replay a different load); the caller adds the
file name.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from collectors.base import BadInput, CollectResult, Skip, frames, per_file, turn_row


@dataclass(frozen=True, slots=True)
class Req:
    """One request as read: arrival in the file's own clock (seconds), tokens, optional block ids."""

    line: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: list[int] | None = None
    hash_block_tokens: int | None = None


def as_int(value: object, line: int, field: str, *, minimum: int = 0) -> int:
    """``value`` as an integer token count ``>= minimum``, else :class:`BadInput` naming line, field and value."""
    if isinstance(value, bool):
        raise BadInput(f"line {line}: field {field!r} = {value!r} is not an integer")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        n = int(value.strip())
    else:
        raise BadInput(f"line {line}: field {field!r} = {value!r} is not an integer")
    if n < minimum:
        raise BadInput(f"line {line}: field {field!r} = {value!r} is below {minimum}")
    return n


def as_time(value: object, line: int, field: str) -> float:
    """``value`` as a finite non-negative number, else :class:`BadInput`."""
    try:
        if isinstance(value, bool):
            raise ValueError
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BadInput(f"line {line}: field {field!r} = {value!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise BadInput(f"line {line}: field {field!r} = {value!r} is not a finite non-negative number")
    return x


def csv_rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, row)`` of a CSV file whose header has ``columns`` (others ignored); :class:`BadInput` otherwise."""
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise BadInput(f"line 1: header {header} lacks column(s) {missing}")
        for row in reader:
            line = reader.line_num
            if None in row or any(row.get(c) in (None, "") for c in columns):
                empty = [c for c in columns if row.get(c) in (None, "")]
                raise BadInput(
                    f"line {line}: wrong number of fields"
                    if None in row and not empty
                    else f"line {line}: field {empty[0]!r} is empty"
                )
            yield line, row


def jsonl_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line, object)`` of a JSON-lines file (blank lines skipped); :class:`BadInput` on a bad line."""
    with path.open(encoding="utf-8") as fh:
        for n, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except ValueError as exc:
                raise BadInput(f"line {n}: not valid JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise BadInput(f"line {n}: not a JSON object")
            yield n, obj


def require(obj: dict, fields: tuple[str, ...], line: int) -> None:
    missing = [f for f in fields if f not in obj]
    if missing:
        raise BadInput(f"line {line}: missing field(s) {missing}")


def first_line(path: Path) -> str:
    """The first line of a file (for cheap format detection); empty on any error."""
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            return fh.readline(1 << 20).strip()
    except OSError:
        return ""


def recogniser(suffix: str, fields: tuple[str, ...]) -> Callable[[Path], bool]:
    """Cheap format detection: a ``.csv`` file whose header names every field, or a ``.jsonl`` file whose first
    line is a JSON object with every field."""

    def recognise(path: Path) -> bool:
        if path.suffix != suffix:
            return False
        if suffix == ".csv":
            return all(c in first_line(path).split(",") for c in fields)
        try:
            obj = json.loads(first_line(path))
        except ValueError:
            return False
        return isinstance(obj, dict) and all(f in obj for f in fields)

    return recognise


def detects(path: Path, suffix: str, recognise: Callable[[Path], bool]) -> bool:
    """A collector's ``detect``: a recognised file, or a folder holding at least one."""
    return bool(files(path, suffix, recognise)) and (path.is_dir() or recognise(path))


def files(path: Path, suffix: str, recognise: Callable[[Path], bool]) -> list[Path]:
    """``path`` itself, or the files of folder ``path`` with ``suffix`` that ``recognise`` accepts (sorted)."""
    if path.is_file():
        return [path]
    return [p for p in sorted(path.glob(f"*{suffix}")) if recognise(p)]


def nonempty(reqs: list[Req]) -> list[Req]:
    if not reqs:
        raise BadInput("empty file: no requests")
    return reqs


def collect_requests(
    name: str,
    path: Path,
    suffix: str,
    recognise: Callable[[Path], bool],
    parse: Callable[[Path], list[Req]],
    *,
    shared_clock: bool,
    clock_note: str,
) -> CollectResult:
    """Read every file with ``parse`` and build the one-turn programs.

    ``shared_clock``: the files' arrival times are on one clock (wall-clock stamps), so one origin (the earliest
    request of all files) keeps their true interleaving; otherwise each file's clock starts at its own first
    request and several files are overlaid from 0, which a note says."""
    skips: list[Skip] = []
    notes: list[str] = []
    read = list(per_file(files(path, suffix, recognise), lambda p: nonempty(parse(p)), skips))
    if not read:
        return CollectResult(frames([], [], None), name, 0, skips, notes)
    origin = min(r.arrival_s for _, reqs in read for r in reqs)
    programs: list[dict] = []
    turns: list[dict] = []
    for p, reqs in read:
        t0 = origin if shared_clock else min(r.arrival_s for r in reqs)
        for r in reqs:
            pid = f"{name}/{p.stem}/{r.line}"
            t = r.arrival_s - t0
            programs.append(
                {
                    "program_id": pid,
                    "source": name,
                    "task_id": f"{p.stem}:{r.line}",
                    "agent": "none",
                    "model": "unknown",
                    "n_turns": 1,
                    "resolved": None,
                    "arrival_s": t,
                    "shared_prefix_id": None,
                    "shared_prefix_tokens": 0,
                }
            )
            turns.append(
                turn_row(
                    program_id=pid,
                    turn_idx=0,
                    input_tokens=r.input_tokens,
                    output_tokens=r.output_tokens,
                    reused_tokens=0,
                    tokens_kind="exact",
                    tool_class="other",
                    t_request_s=t,
                    prefix_hash_ids=r.hash_ids,
                    hash_block_tokens=r.hash_block_tokens,
                )
            )
    n = len(turns)
    span = max(t["t_request_s"] for t in turns)
    notes.append(
        f"{n:,} requests over {span:,.1f} s ({n / span:.2f} requests/s)"
        if span > 0
        else f"{n:,} requests, all at t = 0"
    )
    if len(read) > 1:
        notes.append(f"{len(read)} files: {clock_note}")
    zero_out = sum(t["output_tokens"] == 0 for t in turns)
    if zero_out:
        notes.append(
            f"{zero_out} request(s) with 0 output tokens (the simulator generates 1: an engine always emits one token)"
        )
    return CollectResult(frames(programs, turns, None), name, len(read), skips, notes)
