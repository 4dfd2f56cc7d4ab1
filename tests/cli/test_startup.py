"""``simulate`` starts without pandas (importing pandas is most of a small run's start-up). No
timing here (a loaded CI box); what is guarded is that the simulate path never imports pandas: its modules
import without it, and a whole ``agentreplay simulate`` run in a fresh process never loads it. The figures:
``python benchmarks/startup.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentreplay.trace.io import write_trace
from tests.factories import make_trace

ROOT = Path(__file__).resolve().parents[2]
#: the modules the simulate command imports outside the compiled simulator
SIMULATE_PATH = (
    "agentreplay.cli.app",
    "agentreplay.cli.sim",
    "agentreplay.outdir",
    "agentreplay.bands",
    "agentreplay.trace.io",
    "agentreplay.trace.columns",
    "agentreplay.sim.workload",
    "agentreplay.sim.tables",
    "agentreplay.sim.diagnose",
    "agentreplay.sim.admission",
)


def run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_simulate_path_imports_without_pandas() -> None:
    res = run(
        f"import importlib, sys\nfor m in {SIMULATE_PATH!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m == 'pandas' or m.startswith('pandas.')))"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_a_simulate_run_never_loads_pandas(tmp_path) -> None:
    write_trace(
        tmp_path / "tr", make_trace([[(900, 20, 1.0), (1000, 10, None)], [(400, 5, None)]], shared_prefix_tokens=100)
    )
    code = (
        "import sys\nsys.argv = ['agentreplay', *sys.argv[1:]]\nfrom agentreplay.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print('pandas loaded:', 'pandas.core' in sys.modules)"
    )
    for extra in ([], ["--json"], ["--concurrency", "1", "--max-num-seqs", "1"]):
        out = tmp_path / f"out{len(extra)}"
        res = run(code, "simulate", "--trace", str(tmp_path / "tr"), "--out", str(out), "--quiet", *extra)
        assert res.returncode == 0, res.stderr
        assert "pandas loaded: False" in res.stdout
        assert (out / "programs.parquet").exists() and (out / "summary.json").exists()


def test_every_command_maps_to_its_module() -> None:
    """``agentreplay CMD`` imports only CMD's module (agentreplay.cli.app.COMMANDS): the map names every command."""
    from agentreplay.cli.app import COMMANDS, _name, app

    got = {_name(c): c.callback.__module__.rsplit(".", 1)[1] for c in app.registered_commands}
    got.update(
        {
            g.name: g.typer_instance.registered_commands[0].callback.__module__.rsplit(".", 1)[1]
            for g in app.registered_groups
        }
    )
    assert got == COMMANDS


def test_one_command_imports_only_its_module(tmp_path) -> None:
    code = (
        "import sys\nsys.argv = ['agentreplay', 'catalog', '--json']\nfrom agentreplay.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.startswith('agentreplay.cli.')))"
    )
    res = run(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == str(
        ["agentreplay.cli.app", "agentreplay.cli.config_build", "agentreplay.cli.options", "agentreplay.cli.sim"]
    )
