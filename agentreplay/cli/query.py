"""``query``: DuckDB SQL over the Parquet files of a folder (a thin shell over :mod:`agentreplay.query`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from agentreplay.cli.groups.trace import trace_app
from agentreplay.cli.output import console, fail, show

#: significant digits of the floats ``query`` prints in its table (``--raw``: all of them)
QUERY_DIGITS = 4


@trace_app.command()
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
