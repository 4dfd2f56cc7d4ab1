"""``describe``: the trace card of a canonical trace (a thin shell over :mod:`agentreplay.trace.describe`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentreplay.cli.groups.trace import trace_app
from agentreplay.cli.output import console, fail, print_json, show


@trace_app.command()
def describe(
    trace_dir: Annotated[Path, typer.Argument(help="A canonical trace folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the trace card as JSON.")] = False,
) -> None:
    """Print a trace card: sizes, token distributions, reuse, tool mix and tool-duration quantiles.

    Example: agentreplay describe datasets/swebench-verified
    """
    from agentreplay.trace.describe import describe as run_describe
    from agentreplay.trace.io import TraceError, read_trace

    try:
        card = run_describe(read_trace(trace_dir))
    except TraceError as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(card)
        return
    head = Table(title=f"trace card: {trace_dir}", show_header=False)
    head.add_row("programs / turns", f"{card['programs']:,} / {card['turns']:,}")
    head.add_row("sources", ", ".join(card["sources"]))
    if card["resolved"] is not None:
        head.add_row("resolved", f"{card['resolved']:,}")
    head.add_row("input / output tokens", f"{card['input_tokens_total']:,} / {card['output_tokens_total']:,}")
    head.add_row("input:output ratio", f"{card['input_output_ratio']:.1f}")
    head.add_row("reuse ratio (prompt tokens extending the previous context)", f"{card['reuse_ratio']:.3f}")
    head.add_row("shared-prefix share of prompt tokens", f"{card['shared_prefix_ratio']:.4f}")
    show(head)
    dist = Table(title="distributions")
    for col in ("", "mean", "p50", "p90", "p99", "max"):
        dist.add_column(col, justify="right")
    for key in ("turns_per_program", "input_tokens_per_turn", "output_tokens_per_turn", "input_tokens_per_program"):
        d = card[key]
        dist.add_row(key.replace("_", " "), *(f"{d[k]:,.0f}" for k in ("mean", "p50", "p90", "p99", "max")))
    show(dist)
    tools = Table(title="tool classes (duration after the LLM call, seconds)")
    for col in ("class", "turns", "with duration", "mean", "p50", "p90", "p99", "max"):
        tools.add_column(col, justify="right")
    for cls, n in card["tool_class_mix"].items():
        d = card["tool_duration_s"].get(cls)
        cells = [f"{d[k]:.2f}" for k in ("mean", "p50", "p90", "p99", "max")] if d else ["-"] * 5
        tools.add_row(cls, f"{n:,}", f"{d['n']:,}" if d else "0", *cells)
    show(tools)
    console.print(f"tool duration kinds: {card['tool_duration_kind']}")
