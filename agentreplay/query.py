"""DuckDB over a folder of Parquet outputs: each table of the folder is a view.

What becomes a view, for a folder ``D``:

- ``D/NAME.parquet``: the view ``NAME``;
- ``D/NAME/`` holding Parquet files only in deeper (e.g. hive-partitioned ``key=value/``) folders: the view
  ``NAME`` over all of them (e.g. a sweep's ``results/``);
- ``D/RUN/`` holding ``NAME.parquet`` files itself (the output folder of one run, e.g. a ``compare`` folder's
  one folder per preset): its tables are stacked across runs into the view ``NAME`` with a first column saying
  which run a row comes from: ``preset`` in a compare folder (one holding ``compare.parquet``), ``sweep`` for
  sweep folders, else ``run``. So ``select preset, avg(jct_s) from programs group by 1`` compares presets, and
  no view ever mixes rows of different runs without saying so. A table of ``D`` itself wins over stacked ones.

Only names that are SQL identifiers become views.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import duckdb
import pandas as pd

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _own_tables(d: Path) -> dict[str, str]:
    """View name -> ``SELECT`` for the tables of ``d`` itself: its Parquet files and partitioned folders."""
    found: dict[str, str] = {}
    for f in sorted(d.glob("*.parquet")):
        if _IDENT.match(f.stem):
            found[f.stem] = f"SELECT * FROM read_parquet({_lit(str(f))})"
    for sub in sorted(p for p in d.iterdir() if p.is_dir()):
        if sub.name in found or not _IDENT.match(sub.name) or any(sub.glob("*.parquet")):
            continue
        if any(sub.rglob("*.parquet")):
            found[sub.name] = (
                f"SELECT * FROM read_parquet({_lit(str(sub / '**' / '*.parquet'))}, hive_partitioning=true)"
            )
    return found


def _run_column(d: Path, run: Path) -> str:
    if (d / "compare.parquet").exists():
        return "preset"
    if (run / "sweep.json").exists():
        return "sweep"
    return "run"


def views(data_dir: str | Path) -> dict[str, str]:
    """View name -> the ``SELECT`` defining it, for every table under ``data_dir`` (see the module docstring)."""
    d = Path(data_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: not a directory")
    found = _own_tables(d)
    stacked: dict[str, list[str]] = {}
    for run in sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not any(run.glob("*.parquet")) and not (run / "sweep.json").exists():
            continue  # a partitioned table of d itself (handled above) or no table at all
        col = _run_column(d, run)
        for name, select in _own_tables(run).items():
            if name not in found:
                stacked.setdefault(name, []).append(f"SELECT {_lit(run.name)} AS {col}, * FROM ({select})")
    for name, parts in stacked.items():
        found[name] = " UNION ALL BY NAME ".join(parts)
    return found


def query(sql: str, data_dir: str | Path = ".") -> pd.DataFrame:
    """Run ``sql`` with one view per table of ``data_dir``; returns the result as a DataFrame."""
    con = duckdb.connect()
    try:
        for name, select in views(data_dir).items():
            con.execute(f"CREATE VIEW {name} AS {select}")
        return con.execute(sql).df()
    finally:
        con.close()


def cell(value: object, digits: int | None) -> str:
    """``value`` as a table cell: a finite float to ``digits`` significant digits (``None``: all of them), its
    integer digits all kept (123456.7 -> ``123457``, not ``1.235e+05``); anything else as ``str``."""
    if digits is None or not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    text = f"{value:.{digits}g}"
    return f"{value:.0f}" if "e+" in text and abs(value) < 1e15 else text
