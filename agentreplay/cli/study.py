"""``study``: the design-space study. Parses options, calls :mod:`agentreplay.study`, prints the paths."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from agentreplay.cli.groups.sim import sim_app
from agentreplay.cli.output import console, err, fail


@sim_app.command()
def study(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Report folder: report.md, figures, results.parquet, probe.parquet.")
    ],
    quick: Annotated[
        bool,
        typer.Option("--quick", help="60 programs per cell (40 in the grid) and 1 seed: a fast look, noisier figures."),
    ] = False,
    seeds: Annotated[int | None, typer.Option(help="Seeds per cell (default 3; 1 with --quick).")] = None,
    work: Annotated[
        Path | None, typer.Option(help="Sweep folders, one per experiment (resumable). Default: out/study-work.")
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            help="Run only this experiment (repeatable): routing, "
            "routing-ceiling, reuse-eta, tool-scale, bimodal-tools, tiers, "
            "queue, retention, presets, grid. Default: every "
            "experiment."
        ),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Local worker processes (default: one per CPU).")] = None,
    scheduler_address: Annotated[
        str | None,
        typer.Option(
            help="Run every experiment's sweep on a Dask cluster, e.g. tcp://10.0.0.5:8786 (workers need agentreplay "
            "and the trace and WORK paths readable). Default: a local process pool."
        ),
    ] = None,
    no_probes: Annotated[
        bool, typer.Option("--no-probes", help="Skip the decision-log probes (tool-scale mechanism).")
    ] = False,
) -> None:
    """Run the published agent-serving findings as controlled experiments and write the study report.

    Each experiment is a sweep (one axis varied, everything else fixed) on the bundled SWE-bench Verified trace;
    then a few cells are rerun with the decision log to explain the tool-scale result.

    Example: agentreplay study --out reports/study --workers 2

    Quick look: agentreplay study --quick --out out/study-quick
    """
    from agentreplay.study.probes import probe_study
    from agentreplay.study.report import write_report
    from agentreplay.study.runner import run_study
    from agentreplay.study.spec import StudyOptions
    from agentreplay.sweep import SpecError, make_executor

    try:
        opts = StudyOptions.make(quick, seeds)
    except ValueError as exc:
        raise fail(str(exc)) from None
    work = work or Path("out/study-work")
    try:
        executor = make_executor(workers, scheduler_address)
    except (OSError, TimeoutError, ValueError) as exc:
        raise fail(escape(f"cannot start the executor ({scheduler_address or 'local pool'}): {exc}")) from None
    console.print(f"study: sweeps in {work} on {executor.description}")

    def announce(exp: Any) -> None:
        console.print(f"  {exp.name}: {exp.title}")

    with executor:
        try:
            run = run_study(opts, work, executor, only=only, progress=announce)
        except (SpecError, ValueError) as exc:
            raise fail(escape(str(exc))) from None
    probes = None
    if not no_probes and (not only or "tool-scale" in only):
        console.print("  probes: tool-scale cells with the decision log")
        probes = probe_study(opts)
    command = "agentreplay study " + " ".join(
        [f"--out {out}"] + (["--quick"] if quick else []) + ([f"--seeds {seeds}"] if seeds else [])
    )
    path = write_report(run, out, probes, command)
    for f in run.failed:
        err.print(f"[red]failed[/] {f['experiment']} {f['cell_id']} ({escape(f['label'])}): {escape(str(f['error']))}")
    console.print(f"wrote {path} ({len(run.results)} cells; results.parquet and figures beside it)")
    if run.failed:
        raise typer.Exit(1)
