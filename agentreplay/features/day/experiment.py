"""A day of a large fleet, streamed (``agentreplay fleet day``): synthetic programs drawn in chunks
(:mod:`agentreplay.synth_day`), replayed with the results streamed to Parquet (:mod:`agentreplay.sim.stream`), and,
for comparison, the same run with the tables kept in memory. Variants: ``streamed`` and ``in memory``; each cell
draws its programs afresh (a streamed run hands back finished programs' pages).

Memory is the process's resident set (``/proc/self/statm``) above its level when the run started, sampled as
programs finish and once more after the output tables exist (for the in-memory run: after they are built, as
``simulate --out`` builds them to write them). Wall time is the host clock around the run (:meth:`Day.run`): it
describes the run and never enters simulated state. Each cell keeps ``memory.json`` (curve, wall time, Parquet
size) beside its ``summary.json``; the streamed cell's tables are shown in the output folder.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentreplay.experiment import Experiment, View, about, about_of, over_seeds, param
from agentreplay.experiment.params import check
from agentreplay.experiment.tables import flat
from agentreplay.experiment.tables import markdown as md_table

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.experiment import Results, Run
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload
    from agentreplay.trace.io import Trace

MODES = ("streamed", "in memory")
#: the streamed cell's files shown in the output folder
SHOWN = ("turns.parquet", "programs.parquet", "instances.parquet", "summary.json", "config.toml")


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
            "ttft_p90_s": s["ttft_s"]["p90"],
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
    from agentreplay.sim.run import simulate

    run = DayRun(MODES[0] if stream else MODES[1], {})
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


def same_numbers(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The two runs' summaries are equal (NaN equal to NaN), less the findings (a streamed run has none: they read
    every program at the end, :mod:`agentreplay.sim.stream`)."""

    def text(s: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in s.items() if k != "findings"}, sort_keys=True)

    return text(a) == text(b)


def plot_memory(ax: Any, tables: dict[str, pd.DataFrame]) -> Any:
    """Memory above the run's start vs programs finished, one line per run (the first seed's)."""
    mem, peak = tables["day_memory"], tables["day"]["memory_peak_mib"]
    if "seed" in mem.columns:
        mem = mem[mem["seed"] == mem["seed"].iloc[0]]
    for mode, m in mem.groupby("mode", sort=False):
        x, y = m["programs_finished"].to_numpy(), m["mib"].to_numpy()
        ax.plot(x, y, "o-" if len(x) < 60 else "-", ms=3, label=f"{mode} (peak {peak[mode]:,.0f} MiB)")
    ax.set_xlabel("programs finished")
    ax.set_ylabel("resident memory above the start (MiB)")
    ax.set_title("memory of a day's replay: results streamed vs kept in memory")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def draw(path: Path, tables: dict[str, pd.DataFrame]) -> Path:
    from agentreplay.fleet.figures import save, subplots

    fig, ax = subplots(figsize=(7, 4.2))
    plot_memory(ax, tables)
    return save(fig, path)


def markdown(rows: list[dict[str, Any]], note: str) -> str:
    """The table as Markdown, with a note line under it."""
    table = md_table(list(rows[0]), [cells(r) for r in rows])
    return "# A day of a large fleet, streamed\n\n" + table + "\n".join(["", note, ""])


def cells(row: dict[str, Any]) -> list[str]:
    """A table row's values as text (floats to 4 significant digits, thousands separated)."""
    return [f"{v:,.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v) for v in row.values()]


@dataclass(frozen=True, slots=True)
class DayParams:
    programs: int = param(2000, "Synthetic programs in the day.")
    instances: int = param(32, "Instances (one GPU each, TP 1 unless --tp).")
    concurrency: int = param(2048, "Programs in flight (closed loop).")
    compare: bool = param(True, "Also replay with the tables kept in memory, for the memory comparison.")

    def __post_init__(self) -> None:
        check(self.programs >= 1, "--programs", self.programs, "an integer >= 1")
        check(self.instances >= 1, "--instances", self.instances, "an integer >= 1")
        check(self.concurrency >= 1, "--concurrency", self.concurrency, "an integer >= 1")


def tables_of(runs: dict[str, Run]) -> dict[str, pd.DataFrame]:
    """One seed's tables: a row per mode, the memory curves, whether the two summaries are equal."""
    import pandas as pd

    days = []
    for mode, run in runs.items():
        m = run.json("memory")
        days.append(DayRun(mode, run.summary(), m["wall_s"], [tuple(x) for x in m["memory"]], m["files_mib"]))
    same = same_numbers(days[0].summary, days[1].summary) if len(days) > 1 else None
    memory = [{"mode": d.mode, "programs_finished": n, "mib": v} for d in days for n, v in d.memory]
    return {
        "day": pd.DataFrame([d.row() for d in days]).set_index("mode"),
        "day_memory": pd.DataFrame(memory),
        "day_check": pd.DataFrame([{"same_summary": same}]),
    }


class Day(Experiment):
    name = "day"
    summary = "A synthetic day replayed with results streamed to Parquet, its memory against the in-memory run."
    description = (
        "Programs are drawn in chunks (agentreplay.synth_day) and rows are written as programs finish "
        "(agentreplay.sim.stream), so memory holds live programs only; the streamed summary is checked equal to the "
        "in-memory one. Writes day.md, day_memory.png and the streamed run's tables (turns, programs, "
        "instances.parquet, summary.json, config.toml). The full-size benchmark (1,000,000 programs) is python "
        "benchmarks/bench_sim.py --day."
    )
    example = "agentreplay fleet day --programs 2000 --out reports/fleet/day"
    Params = DayParams
    hardware = MappingProxyType({"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 1})
    outputs = ("day.md", "day_memory.png", *SHOWN)

    def configs(self, base: SimConfig, p: DayParams) -> dict[str, SimConfig]:
        cfg = base.replace(hardware={"instances": p.instances}, workload={"concurrency": p.concurrency})
        return {mode: cfg for mode in (MODES if p.compare else MODES[:1])}

    def workload(self, label: str, trace: Path, p: DayParams, seed: int) -> Trace | Workload:
        """The day's programs, drawn afresh for every cell."""
        from agentreplay.experiment.worker import cached_trace
        from agentreplay.synth_day import day_workload

        return day_workload(cached_trace(trace), p.programs, seed=seed)

    def run(self, label: str, workload: Trace | Workload, cfg: SimConfig, folder: Path) -> None:
        """Replay the day as ``label`` says (streamed into ``folder``, or in memory), timed by the host clock;
        ``summary.json``, ``config.toml`` and ``memory.json`` beside what was streamed."""
        import time

        from agentreplay.sim.config import to_toml
        from agentreplay.sim.workload import Workload

        assert isinstance(workload, Workload)
        day = run_day(workload, cfg, folder, stream=label == MODES[0], clock=time.perf_counter)
        if label != MODES[0]:
            (folder / "summary.json").write_text(json.dumps(day.summary, indent=2, sort_keys=True) + "\n")
            (folder / "config.toml").write_text(to_toml(cfg))
        doc = {"wall_s": day.wall_s, "memory": day.memory, "files_mib": day.files_mib}
        (folder / "memory.json").write_text(json.dumps(doc) + "\n")

    def analyse(self, results: Results, p: DayParams) -> dict[str, pd.DataFrame]:
        tables = over_seeds(results, tables_of)
        hw = results.base.hardware
        same = [v for v in tables["day_check"]["same_summary"] if v is not None]
        note = (
            f"{p.programs:,} synthetic programs following {results.trace.name}, {p.instances} x {hw.gpu} serving "
            f"{hw.model}, {p.concurrency:,} in flight; memory = resident set above the run's start; "
            + (f"streamed summary equal to the in-memory one: {'yes' if all(same) else 'NO'}" if same else "")
            + (f"; mean over seeds {', '.join(map(str, results.seeds))}" if len(results.seeds) > 1 else "")
        )
        tables["_about"] = about(note=note, streamed=str(results.first(MODES[0]).folder))
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        from agentreplay.experiment.runner import link_file

        a = about_of(tables)
        rows = flat(tables["day"]).to_dict("records")
        (out / "day.md").write_text(markdown(rows, a["note"]))
        shown = [link_file(Path(a["streamed"]) / name, out / name) for name in SHOWN]
        return [out / "day.md", draw(out / "day_memory.png", tables), *shown]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        rows = flat(tables["day"]).to_dict("records")
        title = "a day of a large fleet: streamed vs in-memory results"
        return [View(title, list(rows[0]), [cells(r) for r in rows], notes=[about_of(tables)["note"]])]


EXPERIMENT = Day()
