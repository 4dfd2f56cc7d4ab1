"""What every command prints with: the consoles, errors that exit, tables that never cut a value, and JSON.

Tables go through :func:`show`, which never cuts a value; every command that prints a table has ``--json``.
Light on purpose (typer and rich only): every command module imports it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

console = Console()
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` as an error on stderr; the :class:`typer.Exit` to raise (exit status ``code``)."""
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
