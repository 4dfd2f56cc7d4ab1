"""``tasks``: the task-level view of a simulate output (cost per task, goodput, TTFT by step, cache health)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentreplay.cli.groups.sim import sim_app
from agentreplay.cli.output import console, fail, print_json, show


def _table(title: str, head: list[str], rows: list[list[str]]) -> Table:
    t = Table(title=title)
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*r)
    return t


@sim_app.command()
def tasks(
    sim_out: Annotated[Path, typer.Argument(metavar="OUT_DIR", help="The --out folder of agentreplay simulate.")],
    deadline: Annotated[
        float | None,
        typer.Option(
            "--deadline",
            help="Task deadline in seconds of JCT (exclusive with --deadline-x). Default: none (the "
            "relative deadline --deadline-x applies).",
        ),
    ] = None,
    deadline_x: Annotated[
        float | None,
        typer.Option(
            "--deadline-x",
            help="Task deadline as a multiple of each program's uncontended JCT (alone on its "
            "instance, history cached, priced by the run's performance model, plus its tool time). Default: 3 when "
            "--deadline is not given.",
        ),
    ] = None,
    prices: Annotated[
        Path | None,
        typer.Option(
            "--prices",
            help="TOML with a prices table (USD per million tokens, cache TTLs; fields of "
            "agentreplay.fleet.cost.Prices, e.g. reports/tasks/prices.toml). Default: Claude Sonnet 4.5 list "
            "prices.",
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            "-t",
            help="The trace the run replayed: exact per-turn prefix reuse and turn counts (programs "
            "cut by max_model_len count as missed). Default: append-only context assumed.",
        ),
    ] = None,
    collapse_above: Annotated[
        float, typer.Option(help="A collapse: the previous turn's reuse-hit share at least this ...")
    ] = 0.8,
    collapse_below: Annotated[float, typer.Option(help="... and this turn's below this.")] = 0.5,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Folder for the Parquet tables, figures, summary.json and tasks.md, replaced as a "
            "whole. Default: OUT_DIR/tasks.",
        ),
    ] = None,
    listed: Annotated[
        int, typer.Option("--list", help="Collapsed programs to print (all are in collapsed_programs.parquet).")
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Task view of a simulate run: cost, goodput, cache health.

    Provider cost per task with prompt-cache pricing for the 5-minute and 1-hour TTL tiers and their break-even
    share of long gaps; goodput against a task deadline; TTFT p50 / p99 by step; the programs whose prefix reuse
    collapses, with the cause (run simulate with --decision-log to tell eviction, TTL expiry and drops apart).

    Example: agentreplay simulate --trace datasets/swebench-verified --concurrency 64 --decision-log --out out/sim
    && agentreplay tasks out/sim --deadline-x 3
    """
    from agentreplay.fleet import markdown as md
    from agentreplay.fleet.cache_health import Collapse
    from agentreplay.fleet.cost import Prices, PricesError, load_prices
    from agentreplay.fleet.outputs import OutputError, read_output
    from agentreplay.fleet.report import analyse, write_report
    from agentreplay.outdir import OutputDirError, staged
    from agentreplay.trace.io import TraceError, read_trace

    if deadline is not None and deadline_x is not None:
        raise fail("give --deadline or --deadline-x, not both")
    if deadline is None and deadline_x is None:
        deadline_x = 3.0
    target = out or sim_out / "tasks"
    try:
        th = Collapse(collapse_above, collapse_below)
        price = load_prices(prices) if prices is not None else Prices()
        sim = read_output(sim_out, decision_events=("retention",))  # all cache_health reads from the log
        tr = read_trace(trace) if trace is not None else None
        rep = analyse(
            sim,
            price,
            deadline_s=deadline,
            deadline_x=deadline_x,
            collapse=th,
            trace_turns=tr.turns if tr is not None else None,
        )
        with staged(target, "tasks") as tmp:
            write_report(rep, tmp)
    except (OutputError, PricesError, TraceError, OutputDirError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(rep.summary)
        return
    pr = rep.summary["cost"]["prices"]
    show(_table(f"provider cost per task ({pr['name']}; prices: {prices or 'defaults'})", *md.cost_rows(rep)))
    show(_table("break-even share of long gaps between the TTL tiers", *md.break_even_rows(rep)))
    show(_table("self-hosted GPU time (attributed - fleet difference: idle GPU time)", *md.gpu_rows(rep)))
    show(_table("GPU-seconds per program (token share of each iteration x its time x GPUs)", *md.gpu_program_rows(rep)))
    show(_table("task-level goodput", *md.goodput_rows(rep)))
    show(_table("TTFT by step", *md.ttft_rows(rep)))
    show(_table("cache health by step", *md.health_rows(rep)))
    ch = rep.summary["cache_health"]
    if ch["collapses"]:
        show(
            _table(
                f"collapse causes ({ch['collapses']:,} collapses in {ch['programs_collapsed']:,} programs)",
                *md.cause_rows(rep),
            )
        )
        head, rows = md.collapsed_rows(rep, listed)
        show(_table(f"collapsed programs (first {len(rows)} of {len(rep.collapsed):,})", head, rows))
    else:
        console.print(f"no collapse (reuse-hit >= {th.above} then < {th.below})")
    for n in rep.notes:
        console.print(f"note: {n}", markup=False, soft_wrap=True)
    console.print(f"wrote {target}: tasks.md, summary.json, figures and Parquet tables", markup=False, soft_wrap=True)
