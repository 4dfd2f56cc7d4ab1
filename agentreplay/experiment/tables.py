"""An experiment's tables on disk, on the terminal and in Markdown.

- :func:`write` writes every table that is not metadata as ``OUT/NAME.parquet`` (a named index becomes leading
  columns), so ``agentreplay query --data OUT`` reads them;
- :func:`about` / :func:`about_of`: the one-row metadata table (``_about``) an analysis hands its renderer
  (titles, notes, the setting as JSON-able values);
- :func:`markdown` and :func:`plain_view`: a header and text rows as a Markdown table, any table as text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

ABOUT = "_about"


@dataclass(frozen=True, slots=True)
class View:
    """A table as the command line prints it: a title, the header, the rows as text, lines printed under it."""

    title: str
    head: Sequence[str]
    rows: Sequence[Sequence[str]]
    notes: Sequence[str] = ()
    left: int = 1  #: leading columns that are names (left-aligned); the others are numbers


def flat(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a named index turned into leading columns (an unnamed one dropped)."""
    named = any(n is not None for n in df.index.names)
    return df.reset_index() if named else df.reset_index(drop=True)


def write(out: Path, tables: dict[str, pd.DataFrame]) -> list[Path]:
    """``OUT/NAME.parquet`` for every table whose name does not start with ``_``; returns the paths."""
    import pyarrow as pa

    from agentreplay.trace.io import write_tables

    data = {n: pa.Table.from_pandas(flat(df), preserve_index=False) for n, df in tables.items() if n[0] != "_"}
    return list(write_tables(out, data).values()) if data else []


def about(**values: Any) -> pd.DataFrame:
    """The metadata table: one row, one column per value (any Python object)."""
    import pandas as pd

    return pd.DataFrame({k: [v] for k, v in values.items()})


def about_of(tables: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The metadata an analysis returned (:func:`about`), as a dict."""
    df = tables[ABOUT]
    return {c: df[c].iloc[0] for c in df.columns}


def markdown(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (cells with ``str``), ending with a newline."""
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(v) for v in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def cell(value: Any) -> str:
    """A value as text: floats to 4 significant digits (integer digits kept), thousands separated."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:,.4g}"
    return str(value)


def plain_view(name: str, df: pd.DataFrame) -> View:
    """Any table as a :class:`View` titled by its name (a named index first)."""
    f = flat(df)
    keys = sum(n is not None for n in df.index.names)
    rows = [[cell(v.item() if hasattr(v, "item") else v) for v in r] for r in f.itertuples(index=False, name=None)]
    return View(name, [str(c) for c in f.columns], rows, left=max(keys, 1))
