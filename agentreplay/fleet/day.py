"""A day of a large fleet, streamed (issue 20): synthetic programs drawn in chunks (:mod:`agentreplay.synth_day`),
replayed with the results streamed to Parquet (:mod:`agentreplay.sim.stream`), and, for comparison, the same run
with the tables kept in memory. What the ``fleet-day`` command prints and draws; computed here, drawn by
:func:`plot_memory` (compute first, draw second).

Memory is the process's resident set (``/proc/self/statm``) above its level when the run started, sampled as
programs finish and once more after the output tables exist (for the in-memory run: after they are built, as
``simulate --out`` builds them to write them). The host clock is read by the command, not here.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet  # noqa: F401  (imported before a run starts: not counted as the run's memory)

from agentreplay.fleet.figures import subplots
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.workload import Workload


def rss_mib() -> float:
    """Resident set size now, MiB (``/proc/self/statm``; the peak from ``getrusage`` where there is no /proc)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def release_freed_memory() -> None:
    """Collect garbage and hand freed heap pages back to the system (glibc ``malloc_trim``; nothing elsewhere), so a
    run started after another in the same process starts from a comparable resident set."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@dataclass
class DayRun:
    """One replay of the day: ``mode`` ("streamed" or "in memory"), its summary, wall seconds (given by the
    caller's clock) and the memory curve ``(programs finished, MiB above the start)``."""

    mode: str
    summary: dict[str, Any]
    wall_s: float = 0.0
    memory: list[tuple[int, float]] = field(default_factory=list)
    files_mib: float = 0.0

    @property
    def peak_mib(self) -> float:
        return max((m for _, m in self.memory), default=0.0)

    def row(self) -> dict[str, Any]:
        s = self.summary
        return {
            "mode": self.mode,
            "programs": s["programs"],
            "turns": s["turns"],
            "wall_s": round(self.wall_s, 2),
            "turns_per_s": round(s["turns"] / self.wall_s) if self.wall_s > 0 else None,
            "memory_peak_mib": round(self.peak_mib, 1),
            "memory_per_program_kib": round(1024 * self.peak_mib / s["programs"], 2),
            "parquet_mib": round(self.files_mib, 2),
            "jct_mean_s": s["jct_s"]["mean"],
            "jct_p90_s": s["jct_s"]["p90"],
            "ttft_p99_s": s["ttft_s"]["p99"],
            "prefix_hit_rate": s["prefix_hit_rate"],
        }


def run_day(
    workload: Workload,
    cfg: SimConfig,
    out_dir: Path,
    *,
    stream: bool,
    clock: Callable[[], float],
    samples: int = 50,
) -> DayRun:
    """Replay ``workload`` on ``cfg``, streamed into ``out_dir`` or in memory (tables then built, not written),
    sampling memory ``samples`` times along the run; ``clock`` is the caller's wall clock (seconds)."""
    run = DayRun("streamed" if stream else "in memory", {})
    release_freed_memory()
    base = rss_mib()
    every = max(1, workload.n_programs // samples)

    def progress(done: int, total: int) -> None:
        if done % every == 0 or done == total:
            run.memory.append((done, rss_mib() - base))

    t0 = clock()
    res = simulate(workload, cfg, progress=progress, stream_to=out_dir if stream else None)
    if not stream:
        res.tables()  # what simulate --out builds to write
    run.wall_s = clock() - t0
    run.memory.append((workload.n_programs, rss_mib() - base))
    run.summary = res.summary
    if stream:
        res.write(out_dir)
        run.files_mib = sum(p.stat().st_size for p in out_dir.glob("*.parquet")) / 2**20
    return run


def same_numbers(a: DayRun, b: DayRun) -> bool:
    """The two runs' summaries are equal (NaN equal to NaN)."""
    return json.dumps(a.summary, sort_keys=True) == json.dumps(b.summary, sort_keys=True)


def plot_memory(ax: Any, runs: list[DayRun]) -> Any:
    """Memory above the run's start vs programs finished, one line per run."""
    for run in runs:
        x, y = zip(*run.memory, strict=True) if run.memory else ((), ())
        ax.plot(x, y, "o-" if len(x) < 60 else "-", ms=3, label=f"{run.mode} (peak {run.peak_mib:,.0f} MiB)")
    ax.set_xlabel("programs finished")
    ax.set_ylabel("resident memory above the start (MiB)")
    ax.set_title("memory of a day's replay: results streamed vs kept in memory")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def draw(path: Path, runs: list[DayRun]) -> Path:

    fig, ax = subplots(figsize=(7, 4.2))
    plot_memory(ax, runs)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def markdown(rows: list[dict[str, Any]], note: str) -> str:
    """The table as Markdown, with a note line under it."""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(cells(r)) + " |")
    return "\n".join(["# A day of a large fleet, streamed", "", *lines, "", note, ""])


def cells(row: dict[str, Any]) -> list[str]:
    """A table row's values as text (floats to 4 significant digits, thousands separated)."""
    return [f"{v:,.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v) for v in row.values()]
