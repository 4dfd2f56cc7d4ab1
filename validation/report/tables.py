"""Markdown pipe tables for the validation report (no tabulate dependency)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def _fmt(v: Any, floatfmt: str) -> str:
    if isinstance(v, float | np.floating):
        return "" if not np.isfinite(v) else format(float(v), floatfmt)
    return "" if v is None or v is pd.NA else str(v)


def md(df: pd.DataFrame, floatfmt: str = ".2f") -> str:
    """A pipe table (no tabulate dependency)."""
    if not len(df):
        return "(none)"
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = [
        "| " + " | ".join(_fmt(v, floatfmt).replace("|", "/") for v in row) + " |" for row in df.itertuples(index=False)
    ]
    return "\n".join([head, sep, *body])
