"""Start-up cost of the command line: whole-process wall time of three commands a user runs.

Run from the project root:  python benchmarks/startup.py [--runs 10] [--json] [--root PATH ...] [--imports N]

Each case runs ``--runs`` times as a fresh process of the ``agentreplay`` console script (the entry point
``pip install`` writes; ``python -c "from agentreplay.cli import main; main()"`` where there is none):

- ``help``: ``agentreplay --help``;
- ``simulate-help``: ``agentreplay simulate --help``;
- ``simulate``: ``agentreplay simulate --quiet`` on a one-request trace (the bundled trace's first program, cut to
  its first turn, no tool gap), writing its outputs (Parquet tables, summary.json, config.toml) to a fresh folder;
- ``floor``: ``python -c "import pyarrow.parquet, typer, rich.console"``, no code of ours: what any command that reads
  or writes Parquet (pyarrow, which imports numpy itself) behind this CLI framework pays before it starts.

Printed per case: the median and the minimum wall time (seconds), and the heavy third-party packages
(:data:`HEAVY`) the process imported (one extra, unmeasured run). ``--imports N`` also prints each case's N
largest top-level imports by cumulative time (``python -X importtime``; that run is slower than the measured ones,
read the shares). ``--json`` prints all of it as JSON instead.

``--root`` measures other checkouts of the project (e.g. ``git archive HEAD`` unpacked elsewhere, with the compiled
modules and their ``agentreplay/_native_sources.json`` copied in), repeatable: the runs alternate between the
checkouts, so that before / after see the same machine load. Wall times depend on that load: read the minimum.
The measured processes keep a bytecode cache (in a temporary folder, warmed by one unmeasured run of each case),
as an installed package does, even where ``PYTHONDONTWRITEBYTECODE`` is set: without one every module would be
compiled again at each start. This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: third-party packages whose import dominates a start-up; a case reports which of them its process loaded
HEAVY = ("numpy", "pandas", "pyarrow", "matplotlib", "duckdb", "scipy", "pydantic")
CASES = ("help", "simulate-help", "simulate", "floor")
#: the ``floor`` case: the third-party imports a one-request simulation cannot avoid
FLOOR = "import pyarrow.parquet, typer, rich.console"
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
#: run as ``python -c``: the console script's ``main`` with the heavy packages it imported printed at exit
PROBE = (
    "import atexit, sys\n"
    f"HEAVY = {HEAVY!r}\n"
    "atexit.register(lambda: print('HEAVY ' + ','.join(m for m in HEAVY if m in sys.modules), file=sys.stderr))\n"
    "sys.argv = ['agentreplay', *sys.argv[1:]]\n"
    "from agentreplay.cli import main\n"
    "main()\n"
)


#: run as ``python -c SCRIPT OUT``: the bundled trace cut to one program of one turn (no tool gap), written with
#: the project's writer (pure Python, so that an edited hot-path source does not stop it)
ONE_REQUEST = """
import dataclasses, sys
from pathlib import Path
from agentreplay.trace.io import read_trace, write_trace
tr = read_trace(Path("datasets") / "swebench-verified")
prog = tr.programs.iloc[:1].assign(n_turns=1)
turn = tr.turns[tr.turns["program_id"] == prog["program_id"].iloc[0]].iloc[:1].copy()
turn["tool_duration_s"] = None
turn["tool_duration_kind"] = None
write_trace(Path(sys.argv[1]), dataclasses.replace(tr, programs=prog, turns=turn, tool_calls=None))
"""


def one_request_trace(out: Path) -> Path:
    """Write the one-request trace (:data:`ONE_REQUEST`) to ``out``."""
    env = {**os.environ, "AGENTREPLAY_PURE_PYTHON": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", ONE_REQUEST, str(out)], cwd=ROOT, env=env, check=True, timeout=600)
    return out


def entry_point() -> list[str]:
    """The command that starts the console script in a fresh process."""
    script = Path(sys.executable).with_name("agentreplay")
    if script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "import sys; from agentreplay.cli import main; sys.exit(main())"]


def case_args(case: str, trace: Path, out: Path) -> list[str]:
    """The command-line arguments of ``case`` (:data:`CASES`); ``out``: a folder that does not exist yet."""
    if case == "help":
        return ["--help"]
    if case == "simulate-help":
        return ["simulate", "--help"]
    return ["simulate", "--trace", str(trace), "--out", str(out), "--quiet"]


class Checkout:
    """One checkout measured: its root (first on ``PYTHONPATH``) and its own bytecode cache."""

    def __init__(self, root: Path, pycache: Path) -> None:
        self.root, self.pycache = root, pycache
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = str(root) + os.pathsep + self.env.get("PYTHONPATH", "")
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env["PYTHONPYCACHEPREFIX"] = str(pycache)
        self.walls: dict[str, list[float]] = {c: [] for c in CASES}
        self.heavy: dict[str, list[str]] = {}
        self.imports: dict[str, list[tuple[float, str]]] = {}

    def run(self, cmd: list[str]) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed in {self.root} ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        return res

    def timed(self, case: str, args: list[str]) -> None:
        """One measured run of ``case``: the wall time of the whole process."""
        cmd = [sys.executable, "-c", FLOOR] if case == "floor" else [*entry_point(), *args]
        t0 = time.perf_counter()
        self.run(cmd)
        self.walls[case].append(time.perf_counter() - t0)

    def probe(self, case: str, args: list[str]) -> None:
        """Which of :data:`HEAVY` one run of ``case`` imported."""
        err = self.run([sys.executable, "-c", PROBE, *args]).stderr
        line = [x for x in err.splitlines() if x.startswith("HEAVY ")][-1]
        self.heavy[case] = [m for m in line[len("HEAVY ") :].split(",") if m]

    def import_times(self, case: str, args: list[str], n: int) -> None:
        """The ``n`` largest top-level imports of one run of ``case`` (cumulative seconds, module)."""
        err = self.run([sys.executable, "-X", "importtime", "-c", PROBE, *args]).stderr
        top = [(int(m.group(2)) / 1e6, m.group(4)) for m in IMPORT_LINE.finditer(err) if len(m.group(3)) <= 1]
        self.imports[case] = sorted(top, reverse=True)[:n]

    def result(self) -> dict[str, dict[str, Any]]:
        """Per case: median and minimum wall time (s), runs, heavy packages imported, largest imports."""
        return {
            case: {
                "median_s": statistics.median(w),
                "min_s": min(w),
                "runs": len(w),
                "heavy_imports": self.heavy.get(case, []),
                **(
                    {"largest_imports": [[round(s, 4), m] for s, m in self.imports[case]]}
                    if case in self.imports
                    else {}
                ),
            }
            for case, w in self.walls.items()
        }


def measure(roots: list[Path], runs: int, imports: int) -> dict[str, dict[str, dict[str, Any]]]:
    """Every case of every checkout in ``roots``, ``runs`` times, alternating (:class:`Checkout`)."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        trace = one_request_trace(base / "one-request")
        checkouts = [Checkout(r, base / f"pycache{k}") for k, r in enumerate(roots)]
        n = 0

        def out() -> Path:
            nonlocal n
            n += 1
            return base / f"out{n}"

        for c in checkouts:  # warm each checkout's bytecode cache; see which heavy packages each case loads
            for case in CASES:
                if case == "floor":
                    probe = f"{FLOOR}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
                    c.heavy[case] = [m for m in c.run([sys.executable, "-c", probe]).stdout.strip().split(",") if m]
                    continue
                c.run([*entry_point(), *case_args(case, trace, out())])
                c.probe(case, case_args(case, trace, out()))
                if imports:
                    c.import_times(case, case_args(case, trace, out()), imports)
        for _ in range(runs):
            for case in CASES:
                for c in checkouts:  # alternate, so every checkout sees the same load
                    c.timed(case, case_args(case, trace, out()))
        return {str(c.root): c.result() for c in checkouts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="measured runs of each case (default 10)")
    ap.add_argument("--root", type=Path, action="append", help="checkout to measure, repeatable (default: this one)")
    ap.add_argument("--imports", type=int, default=0, metavar="N", help="print each case's N largest imports")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f"--runs {args.runs}: must be >= 1")
    results = measure([r.resolve() for r in args.root or [ROOT]], args.runs, args.imports)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for root, cases in results.items():
        print(f"checkout: {root}")
        for case, r in cases.items():
            heavy = ", ".join(r["heavy_imports"]) or "none"
            print(
                f"  {case:<14} median {r['median_s']:.3f} s, min {r['min_s']:.3f} s ({r['runs']} runs); "
                f"heavy packages imported: {heavy}"
            )
            for s, m in r.get("largest_imports", []):
                print(f"      {s:7.3f} s  {m}")


if __name__ == "__main__":
    main()
