"""Measured data for calibration and validation: run the registered collectors on folders, merge the tables.

Default sources: the folders of ``../shared/measurements`` (beside the project; ``AGENTREPLAY_MEASUREMENTS``
overrides the root). Any other folder or file can be added by path: every registered collector's ``detect``
is tried and each that accepts it collects it (:func:`collect_path`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pandas as pd

from collectors.measured.common import MeasuredResult
from collectors.measured.registry import PROFILE_COLLECTORS
from collectors.measured.registry_runs import RUN_COLLECTORS
from collectors.measured.schema import TABLES

#: Folders of the shared measurements used by default, and the kind of data each holds.
DEFAULT_SOURCES: Final = {
    "profiles-llmservingsim": "component",
    "profiles-vidur": "component",
    "profiles-splitwise": "component",
    "serving-vllm-llmservingsim": "end-to-end",
    "serving-llmperf": "end-to-end",
    "agentic-jct-continuum-exp": "end-to-end",
    "mlperf-inference": "end-to-end",
    "serving-vllm-inference-sim": "end-to-end",
}


def default_root() -> Path:
    env = os.environ.get("AGENTREPLAY_MEASUREMENTS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "measurements"


@dataclass(slots=True)
class Measured:
    """Merged measured tables (``schema.TABLES`` names) and where each part came from."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    origins: list[dict[str, object]] = field(default_factory=list)

    def table(self, name: str) -> pd.DataFrame:
        df = self.tables.get(name)
        return df if df is not None else pd.DataFrame(columns=[f.name for f in TABLES[name]])

    def add(self, result: MeasuredResult, path: Path, collector: str) -> None:
        taken = set(self.table("cells")["cell_id"])
        new = result.tables.get("cells")
        if new is None or new.empty:
            return
        dup = sorted(set(new["cell_id"]) & taken)
        rename = {cid: f"{cid}~{Path(path).name}" for cid in dup}  # same source added twice: keep both apart
        for name, df in result.tables.items():
            if df is None or df.empty:
                continue
            df = df.assign(cell_id=df["cell_id"].replace(rename)) if rename else df
            old = self.tables.get(name)
            self.tables[name] = df if old is None or old.empty else pd.concat([old, df], ignore_index=True)
        self.origins.append(
            {
                "path": _shown(Path(path)),
                "collector": collector,
                "cells": len(new),
                "skipped": [s.reason for s in result.skips][:5],
                "notes": list(result.notes),
            }
        )


def _shown(path: Path) -> str:
    """A source path as recorded in outputs: relative to the measurements root when under it (no host paths in
    committed reports), else as given."""
    try:
        return path.resolve().relative_to(default_root().resolve()).as_posix()
    except ValueError:
        return str(path)


def collect_path(path: str | os.PathLike[str], measured: Measured | None = None) -> Measured:
    """Collect ``path`` with every registered collector whose ``detect`` accepts it. ValueError if none does."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"measured path not found: {p}")
    out = measured if measured is not None else Measured()
    hits = 0
    for col in (*PROFILE_COLLECTORS, *RUN_COLLECTORS):
        if col.detect(p):
            out.add(col.collect(p), p, col.name)
            hits += 1
    if not hits:
        names = ", ".join(c.name for c in (*PROFILE_COLLECTORS, *RUN_COLLECTORS))
        raise ValueError(f"{p}: no registered measured-data collector recognises it (tried {names})")
    return out


def load(
    paths: list[str | os.PathLike[str]] | None = None,
    *,
    defaults: bool = True,
    kinds: tuple[str, ...] = ("component", "end-to-end"),
) -> Measured:
    """The default shared sources of the given kinds (those present) plus ``paths``."""
    out = Measured()
    if defaults:
        root = default_root()
        for name, kind in DEFAULT_SOURCES.items():
            if kind in kinds and (root / name).exists():
                collect_path(root / name, out)
    for p in paths or []:
        collect_path(p, out)
    return out
