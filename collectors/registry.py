"""The trajectory collectors by format name, format auto-detection, and the ingest (:func:`collect`).

Each collector module defines one class implementing :class:`collectors.base.Collector` and imports only
:mod:`collectors.base`; this module imports them and registers each (:func:`register`), in the order of
:data:`collectors.FORMATS` (the names the CLI lists without importing any collector; a test holds the two equal).
A format is one class in its own module plus one :func:`register` line here.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentreplay.policy.registry import did_you_mean
from agentreplay.trace.io import write_trace
from collectors import FILES, files_read
from collectors.azure_llm import AzureLLMCollector
from collectors.base import CollectError, Collector, CollectResult
from collectors.claude_code import ClaudeCodeCollector
from collectors.dag_workflow import DagWorkflowCollector
from collectors.llmservingsim import LLMServingSimCollector
from collectors.lmcache import LMCacheCollector
from collectors.mini_swe_agent import MiniSweAgentCollector
from collectors.mooncake import MooncakeCollector
from collectors.splitwise import SplitwiseCollector
from collectors.swe_agent import SweAgentCollector

_REGISTRY: dict[str, Collector] = {}


def register(collector: Collector) -> Collector:
    """Add ``collector`` under its ``name``; a name registered twice is a ValueError."""
    if collector.name in _REGISTRY:
        raise ValueError(f"collector {collector.name!r} is already registered")
    _REGISTRY[collector.name] = collector
    return collector


for _c in (
    MiniSweAgentCollector(),
    ClaudeCodeCollector(),
    SweAgentCollector(),
    LMCacheCollector(),
    SplitwiseCollector(),
    AzureLLMCollector(),
    MooncakeCollector(),
    LLMServingSimCollector(),
    DagWorkflowCollector(),
):
    register(_c)


def formats() -> dict[str, Collector]:
    """Registered trajectory collectors by format name."""
    return dict(_REGISTRY)


def detect_format(path: Path) -> str:
    """Name of the one collector that recognises ``path``; :class:`CollectError` if none or several do."""
    hits = [name for name, c in _REGISTRY.items() if c.detect(path)]
    if not hits:
        raise CollectError(
            f"{path}: format not recognised by any collector; name it explicitly. The files each format "
            f"reads:\n{files_read()}"
        )
    if len(hits) > 1:
        raise CollectError(f"{path}: ambiguous format, recognised by {hits}; name it explicitly")
    return hits[0]


def collect(
    fmt: str, path: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None, *, strict: bool = False
) -> CollectResult:
    """Ingest ``path`` with collector ``fmt`` (or ``"auto"``) and write the trace to ``out_dir`` if given.

    Under ``strict`` any skipped file fails the ingest before anything is written.
    """
    p = Path(path)
    if not p.exists():
        raise CollectError(f"{p}: no such file or directory")
    reg = _REGISTRY
    name = detect_format(p) if fmt == "auto" else fmt
    if name not in reg:
        raise CollectError(f"unknown format {fmt!r}{did_you_mean(fmt, reg)}; known: auto, {', '.join(reg)}")
    result = reg[name].collect(p)
    if strict and result.skips:
        first = result.skips[0]
        raise CollectError(f"--strict: {len(result.skips)} file(s) skipped, first {first.path}: {first.reason}")
    if result.files_read == 0 and not result.skips:
        raise CollectError(f"{p}: no {name} files found; {name} reads {FILES[name]}")
    if out_dir is not None:
        if result.n_programs == 0 and result.n_tool_calls == 0:
            why = "; ".join(f"{s.path}: {s.reason}" for s in result.skips[:3])
            more = f"; and {len(result.skips) - 3} more" if len(result.skips) > 3 else ""
            raise CollectError(
                f"{p}: nothing could be ingested ({len(result.skips)} file(s) skipped: {why}{more}); no output written"
            )
        write_trace(out_dir, result.trace)
    return result
