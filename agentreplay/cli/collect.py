"""``collect``: native agent trajectories or request-level serving traces into the canonical trace (a thin shell
over :mod:`collectors.registry`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from agentreplay.cli.groups.trace import trace_app
from agentreplay.cli.output import console, err, fail, print_json, show
from collectors import FORMATS, files_read


@trace_app.command(epilog=escape(f"The files each FORMAT reads in PATH (a folder, or one such file):\n{files_read()}"))
def collect(
    fmt: Annotated[
        str,
        typer.Argument(
            metavar="FORMAT",
            help=f"Native format: {' | '.join(FORMATS)} (agent "
            "trajectories, then request-level serving traces), or auto "
            "(the one collector that recognises PATH).",
        ),
    ],
    path: Annotated[Path, typer.Argument(help="A native trace file or folder (the files each FORMAT reads: below).")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output folder, replaced as a whole: programs.parquet, "
            "turns.parquet and, where the format times tool calls, tool_calls.parquet.",
        ),
    ],
    strict: Annotated[bool, typer.Option(help="Fail (exit 1, nothing written) if any file is skipped.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ingest summary as JSON.")] = False,
) -> None:
    """Convert native agent trajectories, or request-level serving traces, into the canonical trace.

    Example: agentreplay collect mini-swe-agent ../shared/datasets/swebench-verified-mini-swe-agent/trajs --out OUT

    Example: agentreplay collect mooncake ../shared/datasets/request-traces/mooncake-fast25/conversation_trace.jsonl
    --out OUT
    """
    from agentreplay.outdir import OutputDirError, staged
    from collectors.base import CollectError
    from collectors.registry import collect as run_collect

    try:
        with staged(out, "trace") as tmp:
            result = run_collect(fmt, path, tmp, strict=strict)
    except (CollectError, OutputDirError) as exc:
        raise fail(str(exc)) from None
    summary = result.summary()
    if as_json:
        print_json(summary)
        return
    t = Table(title=f"ingest summary ({summary['format']})", show_header=False)
    for key in ("files_read", "programs", "turns", "tool_calls", "input_tokens", "output_tokens"):
        t.add_row(key.replace("_", " "), f"{summary[key]:,}")
    t.add_row("files skipped", str(len(result.skips)))
    show(t)
    for note in result.notes:
        console.print(f"[dim]note:[/] {escape(note)}")
    for skip in result.skips:
        err.print(f"[yellow]skipped[/] {escape(skip.path)}: {escape(skip.reason)}")
    console.print(
        f"wrote {out}/programs.parquet, {out}/turns.parquet"
        + (f", {out}/tool_calls.parquet" if result.trace.tool_calls is not None else ""),
        markup=False,
        soft_wrap=True,
    )
