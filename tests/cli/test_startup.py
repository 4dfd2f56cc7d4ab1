"""Start-up: what a command imports. No timing here (a loaded CI box); what is guarded is what each kind of start
loads: ``simulate`` never imports pandas, ``--help`` (of the top level and of a command) imports none of the heavy
packages, and ``agentreplay CMD`` imports CMD's module and the light shared helpers only. The figures:
``python benchmarks/startup.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

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
#: what no ``--help`` may import (each is tens of milliseconds of start-up)
HEAVY = ("numpy", "pandas", "pyarrow", "matplotlib", "duckdb", "scipy")
#: ``main`` with the given arguments, then its exit status and the loaded modules of interest as a JSON line
MAIN = (
    "import json, sys\nsys.argv = ['agentreplay', *sys.argv[1:]]\nfrom agentreplay.cli import main\ncode = 0\n"
    "try:\n    main()\nexcept SystemExit as e:\n    code = e.code or 0\n"
    "mods = sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r} or m.startswith('agentreplay.cli') or m == "
    "'pydantic')\nprint(json.dumps([code, mods]))"
)


def run(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
    )


def loaded(*args: str, code: int = 0) -> list[str]:
    """The modules of interest an ``agentreplay ARGS`` process loaded; it must exit with ``code``."""
    res = run(MAIN.format(heavy=sorted(HEAVY)), *args)
    assert res.returncode == 0, res.stderr
    status, mods = json.loads(res.stdout.strip().splitlines()[-1])
    assert status == code, res.stdout + res.stderr
    return mods


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
    for extra in ([], ["--json"], ["--concurrency", "1", "--max-num-seqs", "1"]):
        out = tmp_path / f"out{len(extra)}"
        mods = loaded("simulate", "--trace", str(tmp_path / "tr"), "--out", str(out), "--quiet", *extra)
        assert not {"pandas", "matplotlib", "duckdb", "pydantic"} & set(mods), mods
        assert (out / "programs.parquet").exists() and (out / "summary.json").exists()


@pytest.mark.parametrize(
    "args", [["--help"], [], ["simulate", "--help"], ["fleet", "--help"], ["fleet", "thinking", "--help"]], ids=str
)
def test_help_imports_no_heavy_package(args: list[str]) -> None:
    """The top-level listing and a command's help build option text from the registries and the configuration's
    defaults, never from numpy, pandas, pyarrow and the like (nor pydantic: agentreplay.cli.coerce). Without a
    command, the listing is shown and the exit status is 2, as click does."""
    mods = loaded(*args, code=0 if args else 2)
    assert not {m.split(".")[0] for m in mods} & {*HEAVY, "pydantic"}, mods


def test_every_command_maps_to_its_module() -> None:
    """``agentreplay CMD`` imports only CMD's module (agentreplay.cli.app.COMMANDS, from the groups): the map names
    every command and named group, each with the module that registers it."""
    from agentreplay.cli.app import COMMANDS, GROUPS, app
    from agentreplay.cli.groups.base import command_name

    assert len(app.registered_groups) == len(GROUPS)  # (reading them imports every command module)
    got = {}
    for g in GROUPS:
        if not g.merged:
            got[str(g.info.name)] = {c.callback.__module__ for c in g.registered_commands}
            continue
        got.update({command_name(c): {c.callback.__module__} for c in g.registered_commands})
        got.update(
            {
                str(t.name): {c.callback.__module__ for c in t.typer_instance.registered_commands}
                for t in g.registered_groups
            }
        )
    assert got == {name: {f"agentreplay.cli.{module}"} for name, module in COMMANDS.items()}


def test_one_command_imports_only_its_module() -> None:
    mods = [m for m in loaded("catalog", "--json") if m.startswith("agentreplay.cli.")]
    helpers = {"app", "coerce", "config_build", "options", "output", "groups", "groups.base"}
    groups = {"groups.trace", "groups.sim", "groups.validate", "groups.fleet", "groups.drive"}
    assert set(mods) == {f"agentreplay.cli.{m}" for m in {*helpers, *groups, "sim"}}


def test_the_listing_is_the_full_applications_help() -> None:
    """``agentreplay --help`` (:func:`agentreplay.cli.app.main`, which imports the command modules for their help
    only, and the experiments not at all) prints what the application with every command built prints: one panel
    per group, in order."""
    from agentreplay.cli import app

    env = {**os.environ, "COLUMNS": "120"}
    res = run("import sys; sys.argv = ['agentreplay', '--help']; from agentreplay.cli import main; main()", env=env)
    assert res.returncode == 0, res.stderr
    full = CliRunner().invoke(app, ["--help"], terminal_width=120, env={"COLUMNS": "120"})
    assert res.stdout == full.output
    panels = [line.split("─ ")[1].split(" ─")[0] for line in res.stdout.splitlines() if line.startswith("╭─ ")]
    assert panels == ["Options", "Trace", "Simulate", "Validate", "Fleet", "Drive"]
    fleet = res.stdout.split("─ Fleet ─")[1].split("─ Drive ─")[0]
    assert "fleet " in fleet and "simulate" not in fleet


def test_a_command_run_from_the_listing_runs_for_real() -> None:
    """``agentreplay -- catalog`` reaches the listing's stand-in for ``catalog``, which runs the real command."""
    res = run(
        "import sys; sys.argv = ['agentreplay', '--', 'catalog', '--json']; from agentreplay.cli import main; main()"
    )
    assert res.returncode == 0, res.stderr
    assert "h100-sxm" in [g["name"] for g in json.loads(res.stdout)["gpus"]]


def test_an_unknown_command_is_named_with_the_closest_one() -> None:
    res = run("import sys; sys.argv = ['agentreplay', 'simulat']; from agentreplay.cli import main; main()")
    assert res.returncode == 2
    assert "No such command 'simulat'" in res.stderr and "simulate" in res.stderr
