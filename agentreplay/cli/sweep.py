"""``sweep`` and ``report sweep`` commands: parse, call :mod:`agentreplay.sweep`, render what it returns."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from agentreplay.cli.coerce import PlainCommand, PlainGroup
from agentreplay.cli.groups.sim import sim_app
from agentreplay.cli.output import console, err, fail, print_json, show

if TYPE_CHECKING:  # the sweep package is imported inside the commands, only when one runs
    from agentreplay.sweep import SweepOutcome, SweepSpec

report_app = typer.Typer(
    name="report",
    cls=PlainGroup,
    no_args_is_help=True,
    help="Render reports from output folders.\n\nExample: agentreplay report sweep out/sweep-small",
)
sim_app.add_typer(report_app, name="report", rich_help_panel=sim_app.panel)


class _ProgressBar:
    """:class:`agentreplay.sweep.SweepProgress` drawn with rich: cells done / failed, elapsed, ETA."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: Any = None
        self._failed = 0

    def start(self, total: int, skipped: int, todo: int) -> None:
        if skipped:
            err.print(f"{skipped} of {total} cells already done in the output folder: skipped")
        self._task = self._progress.add_task("cells", total=todo, failed=0)

    def retry(self, cell: Any, error: str) -> None:
        err.print(f"[yellow]retrying[/] {cell.cell_id} ({escape(cell.label)}): {escape(error)}")

    def done(self, row: dict[str, Any]) -> None:
        if row["status"] != "ok":
            self._failed += 1
            err.print(
                f"[red]failed[/] {row['cell_id']} ({escape(row['label'])}) after {row['attempts']} attempts: "
                f"{escape(row['error'])}"
            )
        self._progress.update(self._task, advance=1, failed=self._failed)


@sim_app.command()
def sweep(
    spec_path: Annotated[
        Path,
        typer.Argument(
            metavar="SPEC",
            help="Sweep spec TOML (\\[sweep], \\[base], \\[grid], \\[\\[zip]]; see examples/sweep-small.toml).",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Output folder (results/, sweep.json); required except with --dry-run. Default: none."
        ),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Local worker processes (default: one per CPU).")] = None,
    scheduler_address: Annotated[
        str | None,
        typer.Option(
            help="Run on a Dask distributed cluster, e.g. tcp://10.0.0.5:8786 (workers need agentreplay installed "
            "and the trace path readable). Default: a local process pool."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the cells (and which are done); run nothing.")
    ] = False,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the cell list (--dry-run) or the outcome as JSON (no progress bar).")
    ] = False,
) -> None:
    """Run every cell of a parameter sweep and stream one row per cell to OUT/results/ (Parquet).

    Cells already ok in OUT are skipped, so rerunning resumes; a failed cell is retried once, then recorded with
    status failed; the command exits 1 if any cell failed (after running the rest).

    Example: agentreplay sweep examples/sweep-small.toml --out out/sweep-small --workers 4

    Then: agentreplay query "select label, jct_mean_s from results order by 2" --data out/sweep-small
    """
    from agentreplay.outdir import OutputDirError, check, mark
    from agentreplay.sweep import SpecError, load_spec, make_executor, run_sweep

    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        raise fail(escape(str(exc))) from None
    if dry_run:
        _list_cells(spec, out, as_json)
        return
    if out is None:
        raise fail("--out is required (except with --dry-run)")
    try:  # a sweep writes its folder in place (cell by cell, resumable), so it claims it instead of staging
        check(out, "sweep")
    except OutputDirError as exc:
        raise fail(str(exc)) from None
    if workers is not None and workers < 1:
        raise fail(f"--workers {workers} is invalid: >= 1")
    if workers is not None and scheduler_address:
        err.print("[yellow]note:[/] --workers is ignored with --scheduler-address (the cluster has its workers)")
    try:
        executor = make_executor(workers, scheduler_address)
    except (OSError, TimeoutError, ValueError) as exc:
        raise fail(escape(f"cannot start the executor ({scheduler_address or 'local pool'}): {exc}")) from None
    (err if as_json else console).print(f"sweep: {len(spec.cells)} cells on {executor.description}")
    with (
        executor,
        Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=quiet or as_json,
        ) as bar,
    ):
        try:
            outcome = run_sweep(spec, out, executor, progress=_ProgressBar(bar))
        except SpecError as exc:
            raise fail(escape(str(exc))) from None
        except KeyboardInterrupt:  # the pool's workers ignore SIGINT and are ended (agentreplay.sweep.executors)
            err.print(
                f"interrupted: the finished cells are kept in {out / 'results'}; rerun the same command to resume",
                markup=False,
            )
            raise typer.Exit(130) from None
        finally:
            if out.is_dir():
                mark(out, "sweep")
    _print_outcome(outcome, spec_path, out, as_json)


def _list_cells(spec: SweepSpec, out: Path | None, as_json: bool) -> None:
    """``--dry-run``: the spec's cells, each with its status in ``out``'s results when there are any."""
    from agentreplay.sweep.store import ResultStore

    status = ResultStore(out / "results", spec.params).status if out and (out / "results").is_dir() else {}
    if as_json:
        print_json(
            [
                {"cell_id": c.cell_id, "label": c.label, "seed": c.seed, "on_disk": status.get(c.cell_id)}
                for c in spec.cells
            ]
        )
        return
    table = Table(title=f"{len(spec.cells)} cells, trace {spec.trace}")
    for col in ("cell_id", "label", "seed", "on disk"):
        table.add_column(col)
    for c in spec.cells:
        table.add_row(c.cell_id, escape(c.label), str(c.seed), status.get(c.cell_id, "-"))
    show(table)


def _print_outcome(outcome: SweepOutcome, spec_path: Path, out: Path, as_json: bool) -> None:
    """Report a finished sweep (JSON or a table); exits 1 (:class:`typer.Exit`) when a cell failed."""
    if as_json:
        print_json(
            {
                "cells": outcome.total,
                "skipped": outcome.skipped,
                "ok": outcome.ok,
                "failed": outcome.failed,
                "retried": outcome.retried,
                "wall_s": outcome.wall_s,
                "out": str(out),
                "failures": outcome.failures,
            }
        )
        raise typer.Exit(outcome.exit_code)
    table = Table(title=f"sweep {spec_path}", show_header=False)
    table.add_row("cells", f"{outcome.total:,} ({outcome.skipped:,} already done)")
    table.add_row("run now", f"{outcome.ok:,} ok, {outcome.failed:,} failed, {outcome.retried:,} retried")
    table.add_row("wall time", f"{outcome.wall_s:,.1f} s")
    show(table)
    console.print(
        f'wrote {out}/results/ (query: agentreplay query "select * from results" --data {out}), '
        f"{out}/sweep.json, {out}/base-config.toml"
    )
    if outcome.failed:
        err.print(
            f"[bold red]{outcome.failed} cell(s) failed[/]; their rows have status 'failed' and the error. "
            "Rerun the same command to retry them."
        )
        raise typer.Exit(1)


@report_app.command("sweep", cls=PlainCommand)
def report_sweep(
    sweep_dir: Annotated[Path, typer.Argument(help="Output folder of `agentreplay sweep`.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Report folder (default: SWEEP_DIR/report).")] = None,
) -> None:
    """Render a sweep's report: Markdown and a self-contained HTML page with the figures the grid supports.

    Example: agentreplay report sweep out/sweep-small
    """
    import duckdb

    from agentreplay.sweep.report import write_report

    try:
        report, paths = write_report(sweep_dir, out)
    except (FileNotFoundError, ValueError, duckdb.Error) as exc:
        raise fail(escape(str(exc))) from None
    for f in report.figures:
        if f.skipped:
            console.print(f"[dim]figure skipped[/] {f.title}: {escape(f.skipped)}")
    console.print(f"wrote {paths['markdown']}, {paths['html']} and {len(paths) - 2} figure(s)")
