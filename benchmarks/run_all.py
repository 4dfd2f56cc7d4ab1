"""The benchmark suite in one command: simulator cells and the 100-cell sweep.

    python benchmarks/run_all.py            # core cells (500 programs, 1 and 8 instances) + 100-cell sweep
    python benchmarks/run_all.py --full     # also the 100,000-program synthetic cell and the 10x / 100x scaling

Prints wall time, simulated turns per second and peak RSS per cell (bench_sim.py), then the sweep's wall time.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_sim.py")] + (["--synth", "--scale"] if args.full else [])
    subprocess.run(cmd, check=True, cwd=ROOT)
    out = Path(tempfile.mkdtemp(prefix="sweep100-"))
    try:
        t0 = time.perf_counter()
        cli = [sys.executable, "-c", "from agentreplay.cli import main; main()"]
        spec = str(ROOT / "benchmarks" / "sweep-100.toml")
        subprocess.run(
            [*cli, "sweep", spec, "--out", str(out), "--workers", str(args.workers)],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - t0
        n = len(list((out / "results").rglob("*.parquet")))
        print(f"sweep-100: {n} cells in {wall:.1f} s with {args.workers} workers (process start-up included)")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
