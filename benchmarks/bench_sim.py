"""Simulator speed benchmark: wall time, simulated turns per second and peak RSS per cell.

Run from the project root:  python benchmarks/bench_sim.py [--scale] [--synth] [--only NAME] [--profile NAME]

Each cell runs in a fresh subprocess so its peak RSS is its own. Cells:
- core-1x: the 500 bundled programs (20,163 turns), closed loop 64 in flight, Llama-3.1-70B TP4 on H100, 1 instance
- core-8x: the same on 8 instances (least-loaded routing)
- with --synth: 100,000 synthetic programs (``agentreplay.synth``, ~4 M turns) on 32 instances, 2,048 in flight,
  and the same with 4,000 programs (synth-4k, a quick stand-in for profiling: ``--profile synth-4k``)
- with --scale: the bundled programs replicated 10x and 100x under new ids, same cluster and concurrency (16 in
  flight, one H100, Llama-3.1-8B), to show how cost grows with the number of turns.
- with --day: a day of a large fleet: ``--programs`` synthetic programs (default 1,000,000, ~40 M
  turns) drawn in chunks (``agentreplay.synth_day``), 32 instances, 2,048 in flight, results streamed to Parquet
  (``simulate(stream_to=...)``, ``agentreplay.sim.stream``); wall time of generation and of the run, turns/s and
  peak RSS, also written as JSON into benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CELLS = {
    "core-1x": {"copies": 1, "instances": 1, "concurrency": 64, "model": "llama-3.1-70b", "tp": 4},
    "core-8x": {"copies": 1, "instances": 8, "concurrency": 64, "model": "llama-3.1-70b", "tp": 4},
}
SYNTH = {
    "synth-4k": {"synthetic": 4_000, "instances": 32, "concurrency": 2048, "model": "llama-3.1-8b", "tp": 1},
    "synth-100k": {"synthetic": 100_000, "instances": 32, "concurrency": 2048, "model": "llama-3.1-8b", "tp": 1},
}
DAY = {"day": {"day": 1_000_000, "instances": 32, "concurrency": 2048, "model": "llama-3.1-8b", "tp": 1}}
SCALE = {
    "scale-1x": {"copies": 1, "instances": 1, "concurrency": 16, "model": "llama-3.1-8b", "tp": 1},
    "scale-10x": {"copies": 10, "instances": 1, "concurrency": 16, "model": "llama-3.1-8b", "tp": 1},
    "scale-100x": {"copies": 100, "instances": 1, "concurrency": 16, "model": "llama-3.1-8b", "tp": 1},
}


#: Components of the hot path for ``--profile``: self time of the functions in these files, summed.
COMPONENTS = {
    "scheduler (vLLM step + admission)": ("agentreplay/scheduler/scheduler.py",),
    "instance (pricing a step, decode runs, events)": ("agentreplay/sim/instance.py",),
    "decode cohort": ("agentreplay/scheduler/cohort.py",),
    "performance model": ("agentreplay/perf/",),
    "KV manager, pool, residency, tiers, retention": ("agentreplay/kv/",),
    "router and admission": ("agentreplay/router/",),
    "orchestrator, tools, requests": (
        "agentreplay/sim/orchestrator.py",
        "agentreplay/sim/tools",
        "agentreplay/request.py",
        "agentreplay/policy/",
    ),
    "metrics recorder": ("agentreplay/sim/metrics.py",),
    "event engine": ("agentreplay/engine.py",),
}


def build(spec: dict) -> tuple[Any, Any]:
    """The cell's workload and configuration."""
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from agentreplay.sim import SimConfig
    from agentreplay.sim.workload import Workload, compile_trace
    from agentreplay.trace.io import read_trace

    trace = read_trace(ROOT / "datasets" / "swebench-verified")
    if spec.get("day"):
        from agentreplay.synth_day import day_workload

        w = day_workload(trace, spec["day"], seed=0)
    elif spec.get("synthetic"):
        from agentreplay.synth import synthesize

        trace = synthesize(trace, spec["synthetic"], seed=0)
    if not spec.get("day"):
        w = compile_trace(trace)
    del trace
    k = spec.get("copies", 1)
    if k > 1:
        n = w.n_turns
        w = Workload(
            program_ids=[f"{pid}#{c}" for c in range(k) for pid in w.program_ids],
            task_ids=w.task_ids * k,
            turn_start=np.concatenate([w.turn_start[:-1] + c * n for c in range(k)] + [[k * n]]),
            input_tokens=np.tile(w.input_tokens, k),
            output_tokens=np.tile(w.output_tokens, k),
            reused_tokens=np.tile(w.reused_tokens, k),
            tool_s=np.tile(w.tool_s, k),
            tool_class=w.tool_class * k,
            arrival_s=np.tile(w.arrival_s, k),
            prefix_ids=w.prefix_ids * k,
            prefix_tokens=np.tile(w.prefix_tokens, k),
        )
    cfg = SimConfig().replace(
        hardware={"gpu": "h100-sxm", "model": spec["model"], "tp": spec["tp"], "instances": spec["instances"]},
        workload={"concurrency": spec["concurrency"]},
    )
    if spec.get("mtbf_s"):  # random replica failures (exponential, per instance; MTTR 10 minutes)
        cfg = cfg.replace(failures={"mtbf_s": spec["mtbf_s"], "mttr_s": 600.0})
    if spec.get("footprint_s"):  # the KV footprint series, one sample per instance per interval
        cfg = cfg.replace(footprint={"interval_s": spec["footprint_s"]})
    return w, cfg


def run_cell(spec: dict) -> dict:
    """In the child: build the workload, time simulate() only, report figures as JSON."""
    from agentreplay.sim import simulate

    t_build = time.perf_counter()
    w, cfg = build(spec)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    if spec.get("day"):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="bench-day-") as tmp:
            res = simulate(w, cfg, stream_to=tmp)
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            written_mib = sum(f.stat().st_size for f in Path(tmp).iterdir()) / 2**20
    else:
        res = simulate(w, cfg)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    s = res.summary
    extra = {}
    if spec.get("day"):
        extra = {"build_s": round(t0 - t_build, 3), "parquet_mib": round(written_mib)}
    return {
        **extra,
        "turns": s["turns"],
        "programs": s["programs"],
        "wall_s": round(wall, 3),
        # CPU time of this process over the same span (all its threads, user + system): wall minus the time
        # the machine ran other jobs instead, plus any time NumPy's BLAS threads spun on the other core
        "cpu_s": round(cpu, 3),
        "turns_per_s": round(s["turns"] / wall),
        "peak_rss_mib": round(rss_mib),
        "events": s["engine"]["events"],
        "iterations": s["engine"]["iterations"],
        "prefix_hit_rate": round(s["prefix_hit_rate"], 4),
        "preemptions": s["preemptions"],
        "jct_mean_s": round(s["jct_s"]["mean"], 1),
    }


def profile_cell(name: str, spec: dict) -> None:
    """Run one cell under cProfile and print where the time goes: self time per component and the top
    functions (profiling slows the run about 2.5x; the shares are what matter). Runs the pure-Python sources
    (``AGENTREPLAY_PURE_PYTHON``): cProfile cannot see inside the compiled modules."""
    import os

    os.environ["AGENTREPLAY_PURE_PYTHON"] = "1"  # before agentreplay is first imported
    import cProfile
    import pstats

    from agentreplay.sim import simulate

    w, cfg = build(spec)
    prof = cProfile.Profile()
    prof.runcall(simulate, w, cfg)
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    shares: dict[str, float] = dict.fromkeys(COMPONENTS, 0.0)
    shares["other (builtins, numpy, setup)"] = 0.0
    for (path, _, _), v in stats.stats.items():  # type: ignore[attr-defined]
        rel = path.replace("\\", "/")
        key = next(
            (c for c, parts in COMPONENTS.items() if any(p in rel for p in parts)), "other (builtins, numpy, setup)"
        )
        shares[key] += v[2]
    print(f"{name}: {total:.1f} s of profiled self time")
    for key, t in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * t / total:5.1f}%  {key}")
    print("top functions by self time:")
    stats.sort_stats("tottime").print_stats(12)


def build_label() -> str:
    """Which build the child processes run: compiled hot path (mypyc, ``setup.py``) or pure Python."""
    code = "from agentreplay import _native; print(len(_native.compiled_modules()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    n = int(out.stdout.strip())
    return f"compiled hot path ({n} modules, mypyc)" if n else "pure Python (AGENTREPLAY_PURE_PYTHON or no compiler)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", action="store_true", help="also run the 10x / 100x linear-scaling cells")
    ap.add_argument("--synth", action="store_true", help="also run the 100,000-program synthetic cell")
    ap.add_argument("--day", action="store_true", help="also run the day cell (a streamed day of a large fleet)")
    ap.add_argument("--programs", type=int, help="programs of the day cell (default 1,000,000)")
    ap.add_argument("--mtbf", type=float, help="day cell: random replica failures, mean seconds between failures")
    ap.add_argument("--footprint", type=float, help="day cell: KV footprint series, seconds between samples")
    ap.add_argument("--only", help="run one cell by name")
    ap.add_argument("--profile", metavar="NAME", help="profile one cell in-process and print where the time goes")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    day = day_cells(args.programs, args.mtbf, args.footprint)
    if args.profile:
        profile_cell(
            args.profile,
            {**CELLS, **SCALE, **SYNTH, **day}[args.profile],
        )
        return
    if args.child:
        print(json.dumps(run_cell(json.loads(args.child))))
        return
    cells = dict(CELLS)
    if args.synth:
        cells.update(SYNTH)
    if args.scale:
        cells.update(SCALE)
    if args.day:
        cells.update(day)
    if args.only:
        cells = {args.only: {**CELLS, **SCALE, **SYNTH, **day}[args.only]}
    label = build_label()
    print(f"build: {label}")
    print(
        f"{'cell':<12}{'turns':>10}{'wall s':>9}{'turns/s':>10}{'RSS MiB':>9}{'events':>12}{'hit':>8}"
        f"{'preempt':>9}{'JCT mean s':>12}"
    )
    for name, spec in cells.items():
        out = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{name:<12}{r['turns']:>10,}{r['wall_s']:>9.2f}{r['turns_per_s']:>10,}{r['peak_rss_mib']:>9,}"
            f"{r['events']:>12,}{r['prefix_hit_rate']:>8.3f}{r['preemptions']:>9,}{r['jct_mean_s']:>12,.1f}",
            flush=True,
        )
        if spec.get("day"):
            save_day(name, spec, r, label)


def day_cells(programs: int | None, mtbf_s: float | None = None, footprint_s: float | None = None) -> dict[str, dict]:
    """The day cell, with ``programs`` programs if given, random failures every ``mtbf_s`` per instance and the
    footprint series every ``footprint_s`` if given."""
    spec = {**DAY["day"], **({"day": programs} if programs is not None else {})}
    spec.update({k: v for k, v in (("mtbf_s", mtbf_s), ("footprint_s", footprint_s)) if v})
    return {"day": spec}


def save_day(name: str, spec: dict, r: dict, label: str) -> None:
    """Print the day cell's extra figures and write its JSON result into benchmarks/results/."""
    import datetime
    import os

    print(
        f"  day: {spec['day']:,} programs, generation {r['build_s']:.1f} s, run {r['wall_s']:.1f} s "
        f"(CPU {r['cpu_s']:.1f} s), "
        f"{r['turns_per_s']:,} turns/s, peak RSS {r['peak_rss_mib']:,} MiB, Parquet {r['parquet_mib']:,} MiB",
        flush=True,
    )
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    compiled = "compiled" if label.startswith("compiled") else "pure"
    mech = (f"-mtbf{spec['mtbf_s']:g}" if spec.get("mtbf_s") else "") + (
        f"-footprint{spec['footprint_s']:g}" if spec.get("footprint_s") else ""
    )
    path = out / f"{name}-{spec['day']}{mech}-{compiled}.json"
    doc = {
        "cell": name,
        "spec": spec,
        "build": label,
        "load_average": list(os.getloadavg()),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _commit(),
        **r,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"  wrote {path.relative_to(ROOT)}")


def _commit() -> str | None:
    """The checkout's commit (``+dirty`` with uncommitted changes outside the results), or None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


if __name__ == "__main__":
    main()
