"""Start-up cost of the CLI: import time of ``agentreplay.cli.app`` and wall time of a one-request ``simulate``.

Run from the project root:  python benchmarks/startup.py [--runs 7] [--root PATH ...] [--no-pin]

- ``import``: ``python -X importtime -c "import agentreplay.cli.app"``, the cumulative microseconds of that
  module as Python reports them (min and median over the runs);
- ``simulate``: wall time and CPU time of ``agentreplay simulate`` (the console script's entry point, in a fresh
  process) on a one-request trace (the bundled trace's first program, first turn only, no tool gap), pinned to one core
  with ``taskset -c 0`` where available;
- CPU seconds per start-up stage of such a process (:data:`STAGES`), and whether it imported pandas (the simulate
  path does not: ``tests/cli/test_startup.py``);
- the eight modules with the largest cumulative import time in that simulate process (top-level imports only).

``--root`` measures other checkouts of the project (e.g. a ``git worktree`` of an older commit, with the compiled
modules copied in), repeatable: the runs alternate between the checkouts, so that before / after see the same
machine load. Wall times depend on that load: read the minimum. The measured processes keep a bytecode cache
(in a temporary folder, warmed by one unmeasured run), as an installed package does, even where
``PYTHONDONTWRITEBYTECODE`` is set: without one every project module is compiled again at each start.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def one_request_trace(root: Path, out: Path) -> Path:
    """The bundled trace cut to one program of one turn (no tool gap), written with the project's writer."""
    sys.path.insert(0, str(root))
    import dataclasses

    from agentreplay.trace.io import read_trace, write_trace

    tr = read_trace(root / "datasets" / "swebench-verified")
    prog = tr.programs.iloc[:1].assign(n_turns=1)
    turn = tr.turns[tr.turns["program_id"] == prog["program_id"].iloc[0]].iloc[:1].copy()
    turn["tool_duration_s"] = None
    turn["tool_duration_kind"] = None
    write_trace(out, dataclasses.replace(tr, programs=prog, turns=turn, tool_calls=None))
    return out


#: Bytecode cache for the measured processes (set in main): outside the checkouts, and used even where
#: PYTHONDONTWRITEBYTECODE is set, since an installed package runs from cached bytecode.
PYCACHE: dict[str, str] = {}


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if str(root) in PYCACHE:
        env["PYTHONPYCACHEPREFIX"] = PYCACHE[str(root)]
    return env


def import_us(root: Path, module: str) -> tuple[int, list[tuple[int, str]]]:
    """Cumulative import time of ``module`` (us) and every top-level import's (us, name)."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        cwd=root,
        env=_env(root),
        capture_output=True,
        text=True,
        check=True,
    )
    return parse(res.stderr, module)


def parse(stderr: str, module: str) -> tuple[int, list[tuple[int, str]]]:
    total, top = 0, []
    for m in LINE.finditer(stderr):
        cum, indent, name = int(m.group(2)), len(m.group(3)), m.group(4)
        if name == module:
            total = cum
        if indent <= 1:
            top.append((cum, name))
    return total, top


def simulate_s(root: Path, trace: Path, out: Path, pin: bool, importtime: bool = False) -> tuple[float, float, str]:
    """Wall time and CPU time (user + system, s) of one ``agentreplay simulate`` process, and its stderr."""
    cmd = [
        sys.executable,
        *(["-X", "importtime"] if importtime else []),
        "-c",
        "from agentreplay.cli import main; main()",
        "simulate",
        "--trace",
        str(trace),
        "--out",
        str(out),
        "--quiet",
        "--gpu",
        "h100-sxm",
        "--model",
        "llama-3.1-8b",
    ]
    if pin and shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=root, env=_env(root), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"simulate failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, res.stderr


#: Run in a fresh process: CPU seconds of each start-up stage of a one-request simulate, in order.
STAGES = """
import sys, time
marks = [("interpreter start", time.process_time())]
def mark(name): marks.append((name, time.process_time()))
import agentreplay.cli.app; mark("import agentreplay.cli.app (typer, rich; command modules where imported eagerly)")
import typer._adapters; mark("import typer's pydantic coercion (used to parse options)")
import numpy, pyarrow.parquet; mark("import numpy, pyarrow")
import agentreplay.sim.run; mark("import the simulator (agentreplay.sim.run), with pandas if it loads")
sys.argv = ["agentreplay", *sys.argv[1:]]
from agentreplay.cli import main
try:
    main()
except SystemExit:
    pass
mark("the command's module, parse, read trace, simulate, write, print")
for (_, a), (name, b) in zip(marks, marks[1:]):
    print(f"{b - a:.3f} {name}", file=sys.stderr)
print(f"pandas loaded: {'pandas.core' in sys.modules}", file=sys.stderr)
"""


def stages(root: Path, trace: Path, out: Path, pin: bool) -> list[tuple[float, str]]:
    """CPU seconds per start-up stage (:data:`STAGES`) of one fresh simulate process."""
    cmd = [sys.executable, "-c", STAGES, "simulate", "--trace", str(trace), "--out", str(out), "--quiet"]
    if pin and shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    res = subprocess.run(cmd, cwd=root, env=_env(root), capture_output=True, text=True, check=True)
    PANDAS[str(root)] = "pandas loaded: True" in res.stderr
    return [
        (float(line.split(" ", 1)[0]), line.split(" ", 1)[1]) for line in res.stderr.splitlines() if line[:1].isdigit()
    ]


#: Whether the last :func:`stages` process of each checkout imported pandas.
PANDAS: dict[str, bool] = {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--root", type=Path, action="append", help="checkout to measure, repeatable (default: this one)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin to one core")
    args = ap.parse_args()
    roots = [r.resolve() for r in args.root or [ROOT]]
    imports: dict[Path, list[float]] = {r: [] for r in roots}
    walls: dict[Path, list[float]] = {r: [] for r in roots}
    cpus: dict[Path, list[float]] = {r: [] for r in roots}
    tops: dict[Path, list[tuple[int, str]]] = {}
    stage_runs: dict[Path, list[list[tuple[float, str]]]] = {r: [] for r in roots}
    with tempfile.TemporaryDirectory() as tmp:
        trace = one_request_trace(ROOT, Path(tmp) / "one")
        for k, r in enumerate(roots):  # one bytecode cache per checkout, warmed by one unmeasured run
            PYCACHE[str(r)] = str(Path(tmp) / f"pycache{k}")
            simulate_s(r, trace, Path(tmp) / f"warm{k}", not args.no_pin)
        for i in range(args.runs):
            for r in roots:  # alternate, so every checkout sees the same load
                imports[r].append(import_us(r, "agentreplay.cli.app")[0] / 1e6)
                wall, cpu, _ = simulate_s(r, trace, Path(tmp) / f"out{i}", not args.no_pin)
                walls[r].append(wall)
                cpus[r].append(cpu)
                stage_runs[r].append(stages(r, trace, Path(tmp) / f"stages{i}", not args.no_pin))
        for r in roots:
            tops[r] = parse(simulate_s(r, trace, Path(tmp) / "out-imports", not args.no_pin, importtime=True)[2], "")[1]
    for r in roots:
        print(f"checkout: {r}")
        print(
            f"  import agentreplay.cli.app: min {min(imports[r]):.3f} s, median "
            f"{statistics.median(imports[r]):.3f} s ({args.runs} runs)"
        )
        print(
            f"  simulate, one request{'' if args.no_pin else ', one core'}: min {min(walls[r]):.3f} s, median "
            f"{statistics.median(walls[r]):.3f} s; CPU (user + system) min {min(cpus[r]):.3f} s, median "
            f"{statistics.median(cpus[r]):.3f} s ({args.runs} runs)"
        )
        print(f"  CPU seconds per stage (median over the runs; pandas imported: {PANDAS[str(r)]}):")
        for k, (_, name) in enumerate(stage_runs[r][0]):
            print(f"    {statistics.median(run[k][0] for run in stage_runs[r]):7.3f} s  {name}")
        print("  largest top-level imports in one such simulate process (cumulative):")
        for us, name in sorted(tops[r], reverse=True)[:8]:
            print(f"    {us / 1e6:7.3f} s  {name}")


if __name__ == "__main__":
    main()
