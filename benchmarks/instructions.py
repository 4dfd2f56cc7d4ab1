"""Machine instructions a simulation executes, counted by valgrind (callgrind): a speed figure that does not
drift with the machine's load or clock, for comparing two builds on a shared machine.

Run from the project root:  python benchmarks/instructions.py [--programs N] [--cache]

It replays the day cell of ``bench_sim.py`` (``--programs`` synthetic programs, default 500, 32 instances, 2,048
in flight, in memory) under ``valgrind --tool=callgrind`` and counts only the instructions inside the event
engine's ``run`` (not start-up, workload generation or the summary), so it needs the compiled build (the count
is of its C function ``CPyPy_engine___Engine___run``) and valgrind (Debian package ``valgrind``). Prints the
instructions, the turns and the instructions per turn; a 500-program day takes about a minute.

``--cache`` also simulates the caches (callgrind ``--cache-sim=yes``, about 2x slower): per turn, the instruction
and data first-level misses (32 KiB, 8-way, 64-byte lines, as this machine's L1) and the data misses of a 1 MiB
last level (its per-core L2; the shared L3 is not modelled), the costs an instruction count does not show
(figures: README, "A day of a large fleet").
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(programs: int) -> None:
    """Inside valgrind: build the cell, simulate, print the turn count."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_sim

    from agentreplay.sim import simulate

    w, cfg = bench_sim.build({**bench_sim.DAY["day"], "day": programs})
    res = simulate(w, cfg)
    print(json.dumps({"turns": res.summary["turns"], "events": res.summary["engine"]["events"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=500)
    ap.add_argument("--cache", action="store_true", help="also simulate the caches (I1, D1 and a 1 MiB last level)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.programs)
        return
    if shutil.which("valgrind") is None:
        sys.exit("instructions.py: valgrind is not installed (Debian: apt-get install valgrind)")
    import agentreplay._native as native

    if "agentreplay.engine" not in native.compiled_modules():
        sys.exit("instructions.py: counts the compiled build's engine; this install is pure Python")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--toggle-collect=CPyPy_engine___Engine___run",
                *(["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,8,64"] if args.cache else []),
                f"--callgrind-out-file={tmp}/cg.out",
                sys.executable,
                __file__,
                "--child",
                "--programs",
                str(args.programs),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        sys.exit(f"instructions.py: the run failed:\n{proc.stderr[-2000:]}")
    names = re.search(r"Events\s*: ([\w ]+)", proc.stderr)
    got = re.search(r"Collected : ([\d ]+)", proc.stderr)
    if got is None or names is None:
        sys.exit(f"instructions.py: no instruction count in valgrind's output:\n{proc.stderr[-2000:]}")
    counts = dict(zip(names.group(1).split(), map(int, got.group(1).split()), strict=True))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    n, turns = counts["Ir"], out["turns"]
    print(f"day of {args.programs:,} programs: {turns:,} turns, {out['events']:,} events")
    print(f"instructions in Engine.run: {n:,} ({n / turns:,.0f} a turn)")
    if args.cache:
        for label, keys in (
            ("instruction L1 misses", ("I1mr",)),
            ("data L1 misses", ("D1mr", "D1mw")),
            ("data 1 MiB last-level misses", ("DLmr", "DLmw")),
        ):
            m = sum(counts[k] for k in keys)
            print(f"{label}: {m:,} ({m / turns:,.1f} a turn)")


if __name__ == "__main__":
    main()
