"""Typer application and the trace commands (collect, describe, query).

Commands parse their options, call a plain function, and render what it returns; nothing here computes.
Tables go through :func:`show`, which never cuts a value; every command that prints a table has ``--json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from collectors import FORMATS, files_read


class _Typer(typer.Typer):
    """A Typer application that imports its command modules (whose decorators register the commands) when its
    commands are first read: by typer building the command line, by ``CliRunner``, by anyone. :func:`main`, which
    runs one command, imports only that command's module instead (:data:`COMMANDS`)."""

    lazy = False  #: set once this module is loaded; until then only its own decorators register

    @property  # type: ignore[override]
    def registered_commands(self) -> list[typer.models.CommandInfo]:
        self._load()
        return self._commands

    @registered_commands.setter
    def registered_commands(self, value: list[typer.models.CommandInfo]) -> None:
        self._commands = value

    @property  # type: ignore[override]
    def registered_groups(self) -> list[typer.models.TyperInfo]:
        self._load()
        return self._groups

    @registered_groups.setter
    def registered_groups(self, value: list[typer.models.TyperInfo]) -> None:
        self._groups = value

    def _load(self) -> None:
        if self.lazy:
            self.lazy = False
            _register()


app = _Typer(
    name="agentreplay",
    help="Replay real LLM-agent traces through a hardware-aware serving simulator and validate it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def show(table: Table) -> None:
    """Print ``table`` without cutting any name or number.

    Rich fits a table to the console width (80 columns when piped) by cutting cells with an ellipsis. Here,
    piped output gets the table's natural width (one line per row, for grep and friends). On a terminal, a
    column whose cells have no space (names, numbers) never wraps, the others wrap at spaces, and the table grows
    past the terminal width rather than cut a word; whatever still does not fit is folded, never cut.
    """
    for col in table.columns:
        col.overflow = "fold"
        if col.width is None and not any(isinstance(c, str) and any(ch.isspace() for ch in c) for c in col.cells):
            col.no_wrap = True
    m = Measurement.get(console, console.options.update_width(1 << 16), table)
    need = m.maximum if not console.is_terminal else max(console.width, m.minimum)
    if need <= console.width:
        console.print(table)
        return
    saved = console._width  # Console has a width setter but no way back to auto-detection
    console.width = need
    try:
        console.print(table)
    finally:
        console._width = saved


def table(title: str, head: Sequence[str], rows: Iterable[Sequence[object]], left: int = 1) -> Table:
    """A titled table of ``rows`` under ``head``: the first ``left`` columns (names) left-aligned, the rest
    (numbers) right-aligned; cells printed with ``str``. Print it with :func:`show`."""
    t = Table(title=title)
    for i, h in enumerate(head):
        t.add_column(str(h), justify="left" if i < left else "right")
    for r in rows:
        t.add_row(*(str(v) for v in r))
    return t


def _plain(x: object) -> object:
    if isinstance(x, float) and x != x:
        return None  # NaN: JSON has no such number
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item"):  # numpy scalar
        return _plain(x.item())  # type: ignore[attr-defined]
    return x


def print_json(data: object) -> None:
    """``data`` as JSON on stdout (NaN as null, numpy scalars as numbers, anything else as its string)."""
    console.print_json(json.dumps(_plain(data), default=str))


@app.command(epilog=escape(f"The files each FORMAT reads in PATH (a folder, or one such file):\n{files_read()}"))
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


@app.command()
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


#: significant digits of the floats ``query`` prints in its table (``--raw``: all of them)
QUERY_DIGITS = 4


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL over the folder's tables (each NAME.parquet is a view NAME).")],
    data: Annotated[
        Path,
        typer.Option(
            "--data",
            "-d",
            help="Folder of Parquet files, e.g. a simulate, compare or "
            "sweep output: a compare folder's per-preset tables are stacked with a "
            "'preset' column.",
        ),
    ] = Path("."),
    raw: Annotated[
        bool,
        typer.Option(
            "--raw", help=f"Print floats at full precision. Default: {QUERY_DIGITS} significant digits (not in --json)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print rows as JSON records.")] = False,
) -> None:
    """Run DuckDB SQL over the Parquet files of a folder.

    Example: agentreplay query "select tool_class, count(*) from turns group by 1" --data datasets/swebench-verified

    Example: agentreplay query "select preset, avg(jct_s) from programs group by 1" --data out/cmp
    """
    import duckdb

    from agentreplay.query import cell
    from agentreplay.query import query as run_query

    try:
        df = run_query(sql, data)
    except (duckdb.Error, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        console.print_json(df.to_json(orient="records"))
        return
    t = Table()
    for col in df.columns:
        t.add_column(str(col))
    for row in df.itertuples(index=False):
        t.add_row(*(escape(cell(v, None if raw else QUERY_DIGITS)) for v in row))
    show(t)


@app.callback()
def _root() -> None:
    """Replay real LLM-agent traces through a hardware-aware serving simulator and validate it."""


def _name(info: typer.models.CommandInfo) -> str:
    return info.name or info.callback.__name__.lower().replace("_", "-")  # typer's default command name


#: Command (or command group) -> the module of agentreplay.cli that defines it; ``tests/cli/test_startup.py``
#: checks it against the registered commands. A command missing here still runs (all modules are imported).
COMMANDS = {
    "collect": "app",
    "describe": "app",
    "query": "app",
    "simulate": "sim",
    "catalog": "sim",
    "compare": "compare",
    "drive": "drive",
    "drive-profile": "drive",
    "study": "study",
    "sweep": "sweep",
    "report": "sweep",
    "tasks": "tasks",
    "fit-tools": "tools",
    "synth": "tools",
    "calibrate": "validate",
    "validate": "validate",
    "plan": "plan",
    "fleet": "fleet_group",
}


def main() -> None:
    """Console entry point. Typer builds the parameters of every registered command before it parses (about
    0.1 s for all of them), and importing every command module costs about 0.03 s more, so a run of one command
    imports its module only and keeps only that command; help and unknown names see all."""
    import importlib
    import sys

    name = sys.argv[1] if len(sys.argv) > 1 else ""
    module = COMMANDS.get(name)
    if module is not None and app.lazy:
        app.lazy = False
        importlib.import_module(f"agentreplay.cli.{module}")
    commands = [c for c in app.registered_commands if _name(c) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if commands or groups:
        app.registered_commands, app.registered_groups = commands, groups
    app()


def _register() -> None:
    """Import the command modules so their ``@app.command()`` decorators run."""
    from agentreplay.cli import (  # noqa: F401
        compare,
        drive,
        fleet_group,
        plan,
        sim,
        study,
        sweep,
        tasks,
        tools,
        validate,
    )


app.lazy = True
