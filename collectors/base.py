"""What every collector shares: the result type, the Protocol, per-file skip handling and trace assembly.

A collector reads one native format and returns a :class:`CollectResult`: the canonical trace plus the
ingest accounting (files read, files skipped with the reason). A bad file never aborts the whole ingest
and is never dropped silently: the collector raises :class:`BadInput` while parsing it, :func:`per_file`
records the skip, and ``--strict`` turns any skip into a failure (DESIGN §8). The collectors by name, format
detection and the ingest itself: :mod:`collectors.registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import pandas as pd

from agentreplay.trace.io import Trace
from agentreplay.trace.schema import DAG_COLUMNS, HASH_COLUMNS, PROGRAMS, TOOL_CALLS, TURNS


class BadInput(ValueError):
    """A native file cannot be ingested; the message says why (the caller adds the file name)."""


class CollectError(RuntimeError):
    """The ingest as a whole failed (unknown format, nothing readable, or a skip under ``--strict``)."""


@dataclass(frozen=True, slots=True)
class Skip:
    path: str
    reason: str


@dataclass(slots=True)
class CollectResult:
    """A collected trace with its ingest accounting."""

    trace: Trace
    fmt: str
    files_read: int = 0
    skips: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def n_programs(self) -> int:
        return len(self.trace.programs)

    @property
    def n_turns(self) -> int:
        return len(self.trace.turns)

    @property
    def n_tool_calls(self) -> int:
        return 0 if self.trace.tool_calls is None else len(self.trace.tool_calls)

    def summary(self) -> dict[str, object]:
        return {
            "format": self.fmt,
            "files_read": self.files_read,
            "programs": self.n_programs,
            "turns": self.n_turns,
            "tool_calls": self.n_tool_calls,
            "input_tokens": int(self.trace.turns["input_tokens"].sum()) if self.n_turns else 0,
            "output_tokens": int(self.trace.turns["output_tokens"].sum()) if self.n_turns else 0,
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skips],
            "notes": list(self.notes),
        }


class Collector(Protocol):
    """One native format. ``detect`` must be cheap (look at names and the first bytes only)."""

    name: str
    description: str

    def detect(self, path: Path) -> bool: ...

    def collect(self, path: Path) -> CollectResult: ...


T = TypeVar("T")


def per_file(paths: Iterable[Path], parse: Callable[[Path], T], skips: list[Skip]) -> Iterator[tuple[Path, T]]:
    """Yield ``(path, parse(path))`` for each file, recording a :class:`Skip` for each that fails.

    ``BadInput`` carries the collector's reason; JSON / Unicode / OS errors are reported with their message.
    Any other exception is a bug in the collector and propagates.
    """
    for p in paths:
        try:
            yield p, parse(p)
        except BadInput as exc:
            skips.append(Skip(str(p), str(exc)))
        except (ValueError, UnicodeDecodeError, OSError) as exc:  # json.JSONDecodeError is a ValueError
            skips.append(Skip(str(p), f"{type(exc).__name__}: {exc}"))


#: a turn row's fields that sources often do not record: None, not NaN (which :func:`frames` gives an absent key)
TURN_UNRECORDED: dict[str, object] = dict.fromkeys(
    (
        "provider_cached_tokens",
        "reasoning_tokens",
        "tool_name",
        "tool_duration_s",
        "tool_duration_kind",
        "llm_latency_s",
        "t_request_s",
        "t_response_s",
    )
)


def turn_row(**fields: object) -> dict:
    """A turn row: the given fields, and None for the :data:`TURN_UNRECORDED` ones not given."""
    return {**TURN_UNRECORDED, **fields}


def frames(programs: list[dict], turns: list[dict], tool_calls: list[dict] | None = None) -> Trace:
    """Build a :class:`Trace` from row dicts, with canonical column order and dtypes."""

    def df(rows: list[dict], schema) -> pd.DataFrame:
        out = pd.DataFrame(rows, columns=[f.name for f in schema])
        optional = {"turns": HASH_COLUMNS, "programs": DAG_COLUMNS}  # (schema 2 and 3): None where a source has none
        for col in optional.get("turns" if schema is TURNS else "programs" if schema is PROGRAMS else "", ()):
            if not out[col].notna().any():
                out[col] = pd.Series([None] * len(out), index=out.index, dtype=object)
        return out

    return Trace(
        programs=df(programs, PROGRAMS),
        turns=df(turns, TURNS),
        tool_calls=None if tool_calls is None else df(tool_calls, TOOL_CALLS),
    )
