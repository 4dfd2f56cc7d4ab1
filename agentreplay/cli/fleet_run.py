"""The command-line shell around :func:`agentreplay.experiment.run_experiment`, shared by ``agentreplay fleet NAME``
and ``agentreplay compare``: progress lines, Ctrl-C, errors, and the tables printed (or JSON) when it is done."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from agentreplay.cli.output import console, err, fail, print_json, show, table

if TYPE_CHECKING:
    from agentreplay.experiment import Experiment, Outcome
    from agentreplay.experiment.runner import Cell
    from agentreplay.sim.config import SimConfig


class Lines:
    """:class:`agentreplay.experiment.runner.Progress` as lines on stderr (none when ``quiet``)."""

    def __init__(self, title: str, out: Path, quiet: bool) -> None:
        self.title, self.out, self.quiet = title, out, quiet
        self.seeds = 1

    def start(self, cells: int, skipped: int, where: str) -> None:
        if not self.quiet:
            done = f" ({skipped} already done in {self.out})" if skipped else ""
            err.print(f"{self.title}: {cells} cells{done} on {where}", markup=False)

    def done(self, cell: Cell) -> None:
        if not self.quiet:
            err.print(f"[dim]done {escape(cell.label)} (seed {cell.seed})[/]")

    def retry(self, cell: Cell, error: str) -> None:
        err.print(f"[yellow]retrying[/] {escape(cell.label)} (seed {cell.seed}): {escape(error)}")


def parse_seeds(value: str | None) -> list[int] | None:
    """``--seeds 0,1,2`` -> [0, 1, 2] (repeats dropped); None when not given."""
    if value is None:
        return None
    try:
        out = list(dict.fromkeys(int(v) for v in value.split(",") if v.strip()))
    except ValueError:
        raise fail(f"--seeds {value!r}: expected comma-separated non-negative integers, e.g. 0,1,2") from None
    if not out or any(v < 0 for v in out):
        raise fail(f"--seeds {value!r}: expected comma-separated non-negative integers, e.g. 0,1,2")
    return out


def execute(
    exp: Experiment,
    p: Any,
    base: SimConfig,
    trace: Path,
    out: Path,
    *,
    seeds: list[int] | None,
    workers: int | None,
    dask: str | None,
    quiet: bool,
    title: str,
) -> Outcome:
    """Run the experiment; a bad value, trace or folder exits 1 with its message, Ctrl-C exits 130 saying where
    the finished cells are kept."""
    from agentreplay.experiment import run_experiment
    from agentreplay.experiment.runner import STORE
    from agentreplay.outdir import OutputDirError

    try:
        return run_experiment(
            exp, p, base, trace, out, seeds=seeds, workers=workers, dask=dask, progress=Lines(title, out, quiet)
        )
    except KeyboardInterrupt:  # the pool's workers ignore SIGINT and are ended (agentreplay.sweep.executors)
        err.print(
            f"interrupted: the finished cells are kept in {out / STORE}; rerun the same command to resume", markup=False
        )
        raise typer.Exit(130) from None
    except (OutputDirError, ValueError, OSError, TimeoutError) as exc:  # ExperimentError, ConfigError, TraceError...
        raise fail(str(exc)) from None


def report(exp: Experiment, outcome: Outcome, as_json: bool) -> None:
    """Print the experiment's tables (its views) and what was written, or the tables as JSON."""
    from agentreplay.experiment.tables import flat

    if as_json:
        tables = {n: flat(df).to_dict("records") for n, df in outcome.tables.items() if not n.startswith("_")}
        print_json({"out": str(outcome.out), "tables": tables})
        return
    for v in exp.views(outcome.tables):
        show(table(v.title, v.head, v.rows, left=v.left))
        for line in v.notes:
            console.print(line, markup=False, soft_wrap=True)
    names = ", ".join(str(p.relative_to(outcome.out)) for p in outcome.paths)
    console.print(f"wrote {outcome.out}: {names}", markup=False, soft_wrap=True)
