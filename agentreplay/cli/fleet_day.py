"""``fleet-day``: a day of a large fleet, with results streamed to Parquet as programs finish."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from agentreplay.cli.app import app, console, fail, print_json, show, table
from agentreplay.cli.options import Json


@app.command("fleet-day")
def fleet_day(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output folder, replaced as a whole: the streamed run's turns / programs / instances.parquet, "
            "summary.json, config.toml, plus day.md and day_memory.png.",
        ),
    ],
    trace: Annotated[
        Path, typer.Option(help="Source trace the synthetic programs follow (agentreplay synth's method).")
    ] = Path("datasets/swebench-verified"),
    programs: Annotated[int, typer.Option(min=1, help="Synthetic programs in the day.")] = 2000,
    instances: Annotated[int, typer.Option(min=1, help="Instances (one GPU each, TP 1).")] = 32,
    concurrency: Annotated[int, typer.Option(min=1, help="Programs in flight (closed loop).")] = 2048,
    gpu: Annotated[str, typer.Option(help="GPU of every instance.")] = "h100-sxm",
    model: Annotated[str, typer.Option(help="Model served.")] = "llama-3.1-8b",
    seed: Annotated[int, typer.Option(help="Seed of the synthetic programs and of the run.")] = 0,
    compare: Annotated[
        bool, typer.Option(help="Also replay with the tables kept in memory, for the memory comparison.")
    ] = True,
    as_json: Json = False,
) -> None:
    """Replay a synthetic day with results streamed to Parquet, and compare its memory with the in-memory run.

    Programs are drawn in chunks (agentreplay.synth_day) and rows are written as programs finish
    (agentreplay.sim.stream), so memory holds live programs only; the streamed summary is checked equal to the
    in-memory one. The full-size benchmark (1,000,000 programs) is python benchmarks/bench_sim.py --day.

    Example: agentreplay fleet-day --programs 2000 --out reports/fleet/day
    """
    import tempfile

    from agentreplay.fleet.day import DayRun, cells, draw, markdown, run_day, same_numbers
    from agentreplay.outdir import OutputDirError, staged
    from agentreplay.sim import CapacityError, SimConfig
    from agentreplay.synth_day import day_workload
    from agentreplay.trace.io import TraceError, read_trace

    try:
        cfg = SimConfig().replace(
            hardware={"gpu": gpu, "model": model, "tp": 1, "instances": instances},
            workload={"concurrency": concurrency},
            seed=seed,  # type: ignore[arg-type]
        )
        workload = day_workload(read_trace(trace), programs, seed=seed)
    except (TraceError, ValueError) as exc:
        raise fail(str(exc)) from None
    runs: list[DayRun] = []
    try:
        with staged(out, "fleet-day") as tmp:
            runs.append(run_day(workload, cfg, tmp, stream=True, clock=time.perf_counter))
            if compare:
                with tempfile.TemporaryDirectory() as scratch:
                    # (the streamed run handed back finished programs' pages: draw the same programs again)
                    workload = day_workload(read_trace(trace), programs, seed=seed)
                    runs.append(run_day(workload, cfg, Path(scratch), stream=False, clock=time.perf_counter))
            rows = [r.row() for r in runs]
            same = same_numbers(runs[0], runs[1]) if compare else None
            note = (
                f"{programs:,} synthetic programs following {trace.name}, {instances} x {gpu} serving {model}, "
                f"{concurrency:,} in flight; memory = resident set above the run's start; "
                + ("" if same is None else f"streamed summary equal to the in-memory one: {'yes' if same else 'NO'}")
            )
            (tmp / "day.md").write_text(markdown(rows, note))
            draw(tmp / "day_memory.png", runs)
    except (CapacityError, OutputDirError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json({"rows": rows, "same_summary": same, "out": str(out)})
        return
    show(table("a day of a large fleet: streamed vs in-memory results", list(rows[0]), [cells(r) for r in rows]))
    console.print(note)
    console.print(f"wrote {out}/ (Parquet, summary.json, day.md, day_memory.png)")
