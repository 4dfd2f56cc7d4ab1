"""``fit-tools`` and ``synth`` commands: thin shells over ``validation.tools.model`` and ``agentreplay.synth``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentreplay.cli.groups.trace import trace_app
from agentreplay.cli.output import console, fail, print_json, show


@trace_app.command("fit-tools")
def fit_tools(
    trace_dirs: Annotated[list[Path], typer.Argument(metavar="TRACE_DIR...", help="Canonical trace folder(s).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Model file to write (JSON).")],
    report: Annotated[
        Path | None, typer.Option(help="Folder for tool_fit.md + QQ/CDF PNGs per class. Default: no report.")
    ] = None,
    unit: Annotated[
        str,
        typer.Option(
            help="turn (gap after an LLM call; what the simulator draws) | call "
            "(one row per timed tool call, tool_calls.parquet)"
        ),
    ] = "turn",
    kind: Annotated[str | None, typer.Option(help="Keep only measured | estimated durations (default: all).")] = None,
    compare: Annotated[
        Path | None, typer.Option(help="Another trace folder to compare per class (2-sample KS). Default: none.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fit table (and comparison) as JSON.")] = False,
) -> None:
    """Fit per-class tool-duration distributions (MLE, chosen by AIC) and write a tool-model file.

    A class with fewer than validation.tools.fit.MIN_CLASS_N (10) durations gets no model of its own: it is
    reported as too few samples, with its count, and the simulator draws its gaps from the pooled overall fit.

    Example: agentreplay fit-tools /tmp/cc --kind measured --out models/tools-cc.json --report reports/tools-cc
    """
    from agentreplay.trace.io import TraceError
    from validation.tools.fit import MIN_CLASS_N
    from validation.tools.model import (
        compare_sources,
        fit_table,
        load_durations,
        repo_covariate,
        write_model,
        write_report,
    )
    from validation.tools.model import fit_tools as run_fit

    if unit not in ("turn", "call"):
        raise fail(f"--unit {unit!r}: expected turn or call")
    if kind not in (None, "measured", "estimated", "sampled"):
        raise fail(f"--kind {kind!r}: expected measured, estimated or sampled")
    try:
        result = run_fit(trace_dirs, unit=unit, kind=kind)  # type: ignore[arg-type]
        other = load_durations(compare, unit=unit) if compare else None  # type: ignore[arg-type]
    except (TraceError, ValueError) as exc:
        raise fail(str(exc)) from None
    write_model(result, out)
    rows = fit_table(result)
    comparison = compare_sources(result.durations, other, "fit", "other") if other is not None else None
    written = [str(out)]
    if report is not None:
        cov = [c for c in (repo_covariate(result.durations),) if c is not None]
        written.insert(0, f"{write_report(result, report, comparison=comparison, covariates=cov)} and plots")
    if as_json:
        print_json(
            {
                "model": str(out),
                "fits": rows.to_dict(orient="records"),
                "not_fitted": result.skipped,
                "too_few_samples": result.pooled,
                "min_class_n": MIN_CLASS_N,
                "comparison": None if comparison is None else comparison.to_dict(orient="records"),
            }
        )
        return
    table = Table(title=f"tool model: {result.model['default_source']} (unit {unit}, seconds)")
    for col in ("class", "n", "p0", "family", "AIC", "KS", "AD", "median", "p90"):
        table.add_column(col, justify="left" if col in ("class", "family") else "right", overflow="fold")
    params = Table(title="parameters (mu/sigma: of ln seconds; scale: seconds)")
    params.add_column("class")
    params.add_column("params", overflow="fold")
    for row in rows.itertuples(index=False):
        table.add_row(
            row[0],
            f"{row.n:,}",
            f"{row.p_zero:.3f}",
            row.family,
            f"{row.aic:.0f}",
            f"{row.ks:.3f}",
            f"{row.ad:.2f}",
            f"{row.median_s:.3g}",
            f"{row.p90_s:.3g}",
        )
        params.add_row(row[0], row.params)
    show(table)
    show(params)
    if result.skipped:
        console.print(f"[dim]not fitted (no positive duration, sampled from overall):[/] {', '.join(result.skipped)}")
    if result.pooled:
        console.print(
            f"[yellow]too few samples[/] (fewer than {MIN_CLASS_N} durations; pooled with overall): "
            + ", ".join(f"{c} (n = {n})" for c, n in result.pooled.items())
        )
    if comparison is not None:
        cmp_table = Table(title=f"fitted data vs {compare} (seconds)")
        for col in ("class", "n", "n other", "median", "median other", "p90", "p90 other", "KS", "KS p"):
            cmp_table.add_column(col, justify="right", overflow="fold")
        for r in comparison.itertuples(index=False):
            cmp_table.add_row(*(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r))
        show(cmp_table)
    for w in written:
        console.print(f"wrote {w}", markup=False, soft_wrap=True)


@trace_app.command()
def synth(
    trace: Annotated[Path, typer.Option("--trace", "-t", help="Source canonical trace folder.")],
    programs: Annotated[int, typer.Option("--programs", "-n", help="Number of synthetic programs.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output trace folder, replaced as a whole.")],
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    tool_model: Annotated[
        Path | None, typer.Option(help="Tool-model JSON (fit-tools). Default: resample the trace's own durations.")
    ] = None,
    jitter: Annotated[float, typer.Option(help="Sd of the log-normal token jitter (0.1: about +-10 %).")] = 0.1,
    fanout: Annotated[int, typer.Option(help="Sub-agents per spawning turn (agentreplay.fanout); 0: none.")] = 0,
    fanout_prob: Annotated[float, typer.Option(help="Chance that a non-last turn spawns (with --fanout).")] = 0.05,
    fanout_share: Annotated[str, typer.Option(help="Sub-agents share the parent's 'context' or 'system'.")] = "context",
) -> None:
    """Draw synthetic programs that follow a real trace (turn counts, tokens, tool classes) and write a trace.

    With --fanout N, turns then spawn N sub-agent programs each with probability --fanout-prob (schema-3 parent
    links; the parent joins them before its next turn; agentreplay/fanout.py).

    Example: agentreplay synth --trace datasets/swebench-verified --programs 2000 --out /tmp/synth --seed 1
    """
    from agentreplay.outdir import staged
    from agentreplay.sim.tools_generative import ToolModelError, ToolSampler
    from agentreplay.synth import synthesize
    from agentreplay.trace.io import TraceError, read_trace, write_trace

    try:
        with staged(out, "trace") as tmp:
            sampler = ToolSampler(tool_model) if tool_model else None
            result = synthesize(read_trace(trace), programs, seed=seed, tool_sampler=sampler, jitter=jitter)
            if fanout > 0:
                from agentreplay.fanout import fan_out

                if fanout_share not in ("context", "system"):
                    raise ValueError(f"--fanout-share: 'context' or 'system', got {fanout_share!r}")
                result, _ = fan_out(result, fanout=fanout, prob=fanout_prob, share=fanout_share, seed=seed)  # type: ignore[arg-type]
            write_trace(tmp, result)
    except (TraceError, ToolModelError, ValueError) as exc:  # a foreign --out folder: OutputDirError(ValueError)
        raise fail(str(exc)) from None
    console.print(f"wrote {len(result.programs):,} programs / {len(result.turns):,} turns to {out}")
