"""What every collector shares: the result type, per-file skip handling, the registry and auto-detection.

A collector reads one native format and returns a :class:`CollectResult`: the canonical trace plus the
ingest accounting (files read, files skipped with the reason). A bad file never aborts the whole ingest
and is never dropped silently: the collector raises :class:`BadInput` while parsing it, :func:`per_file`
records the skip, and ``--strict`` turns any skip into a failure (DESIGN §8).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import pandas as pd

from agentreplay.trace.io import Trace, write_trace
from agentreplay.trace.schema import PROGRAMS, TOOL_CALLS, TURNS


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


def frames(programs: list[dict], turns: list[dict], tool_calls: list[dict] | None = None) -> Trace:
    """Build a :class:`Trace` from row dicts, with canonical column order and dtypes."""

    def df(rows: list[dict], schema) -> pd.DataFrame:
        out = pd.DataFrame(rows, columns=[f.name for f in schema])
        if schema is TURNS:  # optional block-hash columns (schema 2): None where a source has none
            for col in ("prefix_hash_ids", "hash_block_tokens"):
                if not out[col].notna().any():
                    out[col] = pd.Series([None] * len(out), index=out.index, dtype=object)
        return out

    return Trace(
        programs=df(programs, PROGRAMS),
        turns=df(turns, TURNS),
        tool_calls=None if tool_calls is None else df(tool_calls, TOOL_CALLS),
    )


def _registry() -> dict[str, Collector]:
    from collectors.azure_llm import AzureLLMCollector
    from collectors.claude_code import ClaudeCodeCollector
    from collectors.llmservingsim import LLMServingSimCollector
    from collectors.lmcache import LMCacheCollector
    from collectors.mini_swe_agent import MiniSweAgentCollector
    from collectors.mooncake import MooncakeCollector
    from collectors.splitwise import SplitwiseCollector
    from collectors.swe_agent import SweAgentCollector

    cs: list[Collector] = [MiniSweAgentCollector(), ClaudeCodeCollector(), SweAgentCollector(), LMCacheCollector(),
                           SplitwiseCollector(), AzureLLMCollector(), MooncakeCollector(), LLMServingSimCollector()]
    return {c.name: c for c in cs}


def formats() -> dict[str, Collector]:
    """Registered trajectory collectors by format name."""
    return _registry()


def detect_format(path: Path) -> str:
    """Name of the one collector that recognises ``path``; :class:`CollectError` if none or several do."""
    hits = [name for name, c in _registry().items() if c.detect(path)]
    if not hits:
        raise CollectError(f"{path}: format not recognised by any collector ({', '.join(_registry())}); "
                           "name it explicitly")
    if len(hits) > 1:
        raise CollectError(f"{path}: ambiguous format, recognised by {hits}; name it explicitly")
    return hits[0]


def collect(fmt: str, path: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
            *, strict: bool = False) -> CollectResult:
    """Ingest ``path`` with collector ``fmt`` (or ``"auto"``) and write the trace to ``out_dir`` if given.

    Under ``strict`` any skipped file fails the ingest before anything is written.
    """
    p = Path(path)
    if not p.exists():
        raise CollectError(f"{p}: no such file or directory")
    reg = _registry()
    name = detect_format(p) if fmt == "auto" else fmt
    if name not in reg:
        raise CollectError(f"unknown format {fmt!r}; known: auto, {', '.join(reg)}")
    result = reg[name].collect(p)
    if strict and result.skips:
        first = result.skips[0]
        raise CollectError(f"--strict: {len(result.skips)} file(s) skipped, first {first.path}: {first.reason}")
    if result.files_read == 0 and not result.skips:
        raise CollectError(f"{p}: no {name} files found")
    if out_dir is not None:
        if result.n_programs == 0 and result.n_tool_calls == 0:
            why = "; ".join(f"{s.path}: {s.reason}" for s in result.skips[:3])
            more = f"; and {len(result.skips) - 3} more" if len(result.skips) > 3 else ""
            raise CollectError(f"{p}: nothing could be ingested ({len(result.skips)} file(s) skipped: {why}{more}); "
                               "no output written")
        write_trace(out_dir, result.trace)
    return result
