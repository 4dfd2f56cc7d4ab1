"""``fleet-thinking``: the thinking budget on a trace (tail JCT by reasoning-token cap and load)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentreplay.cli.app import app, console, err, fail, print_json, show, table
from agentreplay.cli.fleet_spec import base_config, ints
from agentreplay.cli.options import BUNDLED_TRACE, FleetTrace, Json


@app.command("fleet-thinking")
def fleet_thinking(
    trace: FleetTrace = BUNDLED_TRACE,
    gpu: Annotated[str, typer.Option(help="GPU catalog name.")] = "h100-sxm",
    model: Annotated[str, typer.Option(help="Model catalog name.")] = "llama-3.1-70b",
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 4,
    programs: Annotated[int | None, typer.Option(help="First N programs of the trace. Default: all.")] = None,
    loads: Annotated[str, typer.Option(help="Programs in flight (closed loop), comma-separated.")] = "4,64",
    budgets: Annotated[
        str, typer.Option(help="Reasoning tokens allowed per turn, comma-separated; none = no cap (listed first).")
    ] = "none,128,32,0",
    reasoning_in_context: Annotated[
        bool,
        typer.Option(help="Earlier turns' thinking is part of later prompts (cuts shrink them). Default: not."),
    ] = False,
    config: Annotated[
        Path | None, typer.Option(help="Base TOML configuration (other sections). Default: the built-in defaults.")
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for thinking.md and thinking.png.")] = Path(
        "reports/fleet/thinking"
    ),
    as_json: Json = False,
) -> None:
    """Thinking budget on a trace: tail JCT (p90, p99) when each turn's reasoning tokens are capped.

    Output tokens drop by max(0, reasoning - budget); later prompts keep their recorded size unless
    --reasoning-in-context (agentreplay.sim.thinking). Turns without a recorded reasoning count stay uncapped.

    Example: agentreplay fleet-thinking --budgets none,128,32,0 --loads 4,64
    """
    from agentreplay.fleet import thinking as T
    from agentreplay.sim.config import ConfigError
    from agentreplay.sim.workload import load_workload
    from agentreplay.trace.io import TraceError

    try:
        budget_list = T.parse_budgets(budgets)
    except ValueError as exc:
        raise fail(str(exc)) from None
    load_list = ints(loads, "--loads")
    cfg = base_config(config, gpu, model, tp, programs)
    try:
        w = load_workload(trace)
        stats = T.trace_stats(w.head(programs) if programs else w)
        rows = T.run_budgets(
            w,
            cfg,
            load_list,
            budget_list,
            reasoning_in_context,
            progress=lambda m: err.print(f"[dim]{m}[/]"),
        )
    except (ConfigError, TraceError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json({"trace": stats.as_dict(), "rows": rows})
        return
    title = f"thinking budget: {model} TP{tp} on {gpu}, {trace.name}" + (
        f" (first {programs} programs)" if programs else ""
    )
    show(table(title, T.HEAD, T.table_rows(rows), left=2))
    line = (
        f"trace: {stats.turns:,} turns, {stats.turns_with_reasoning:,} with reasoning tokens "
        f"({stats.reasoning_tokens:,} tokens), {stats.turns_unrecorded:,} without a recorded count (left uncapped)"
    )
    console.print(line, markup=False)
    out.mkdir(parents=True, exist_ok=True)
    notes = [
        line + ".",
        "Rule (agentreplay.sim.thinking): output' = max(1, out - max(0, min(reasoning, out) - budget)); "
        + ("later prompts shrink by the earlier cuts." if reasoning_in_context else "later prompts as recorded."),
        f"Command: agentreplay fleet-thinking --loads {loads} --budgets {budgets}"
        + (f" --programs {programs}" if programs else "")
        + (" --reasoning-in-context" if reasoning_in_context else ""),
    ]
    (out / "thinking.md").write_text(T.markdown(title, rows, notes))
    T.draw(rows, out / "thinking.png")
    console.print(f"wrote {out}/thinking.md, {out}/thinking.png", markup=False)
