"""DuckDB over a folder of Parquet outputs: each ``NAME.parquet`` (or partitioned folder ``NAME/``) is a view."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pandas as pd

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def tables(data_dir: str | Path) -> dict[str, str]:
    """View name -> Parquet glob for every table under ``data_dir`` (files and hive-partitioned folders)."""
    d = Path(data_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: not a directory")
    found: dict[str, str] = {}
    for f in sorted(d.glob("*.parquet")):
        found[f.stem] = str(f)
    for sub in sorted(p for p in d.iterdir() if p.is_dir()):
        if _IDENT.match(sub.name) and any(sub.rglob("*.parquet")) and sub.name not in found:
            found[sub.name] = str(sub / "**" / "*.parquet")
    return {name: glob for name, glob in found.items() if _IDENT.match(name)}


def query(sql: str, data_dir: str | Path = ".") -> pd.DataFrame:
    """Run ``sql`` with one view per table of ``data_dir``; returns the result as a DataFrame."""
    con = duckdb.connect()
    try:
        for name, glob in tables(data_dir).items():
            hive = "**" in glob
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{glob}'"
                        f"{', hive_partitioning=true' if hive else ''})")
        return con.execute(sql).df()
    finally:
        con.close()
