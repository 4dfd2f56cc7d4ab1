"""A finished run (:class:`SimResult`): its summary, configuration, decision log and tables, and how they are
written (turns / programs / instances.parquet, summary.json, config.toml, decisions.jsonl)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from agentreplay.sim import tables
from agentreplay.sim.config import SimConfig, to_toml
from agentreplay.sim.metrics import Recorder
from agentreplay.trace.io import write_tables

if TYPE_CHECKING:  # the DataFrames are built on demand
    import pandas as pd


class SimResult:
    """A finished run: ``summary``, ``config``, ``decisions`` (None without the decision log) and its tables.

    The tables come as NumPy columns (:meth:`columns`), Arrow tables (:meth:`tables`, what :meth:`write` writes)
    or DataFrames (``turns``, ``programs``, ``instances``); the DataFrames are built on first use, since importing
    pandas is most of a small run's start-up (:mod:`agentreplay.sim.tables`)."""

    __slots__ = ("_columns", "_frames", "_migrations", "_rec", "config", "decisions", "extra", "summary")

    def __init__(
        self,
        rec: Recorder,
        migrations: list[int],
        summary: dict[str, Any],
        config: SimConfig,
        decisions: list[dict[str, Any]] | None = None,
    ) -> None:
        self.summary, self.config, self.decisions = summary, config, decisions
        self._rec, self._migrations = rec, migrations
        self._columns: dict[str, tables.Columns | None] = {}
        self._frames: dict[str, pd.DataFrame] = {}
        #: tables of mechanisms that are on: NumPy columns (e.g. ``footprint``) or Arrow tables (``failover``)
        self.extra: dict[str, tables.Columns | pa.Table] = {}

    def columns(self, name: str) -> tables.Columns | None:
        """``turns``, ``programs`` or ``instances`` as NumPy columns (None: instances of a run without
        samples, whose frame has object columns)."""
        if self._rec.sink is not None:
            raise RuntimeError(f"the tables were streamed to {self._rec.sink.out} (read them from there)")
        if name not in self._columns:
            if name == "turns":
                self._columns[name] = tables.turn_columns(self._rec)
            elif name == "programs":
                turns = self.columns("turns")
                assert turns is not None
                self._columns[name] = tables.program_columns(self._rec, turns, self._migrations)
            elif name == "instances":
                self._columns[name] = tables.instance_columns(self._rec)
            elif name in self.extra:
                self._columns[name] = self.extra[name]
            else:
                raise KeyError(name)
        return self._columns[name]

    def _frame(self, name: str) -> pd.DataFrame:
        if name not in self._frames:
            rec = self._rec
            if name == "programs":
                df = rec.programs_frame(self.turns)
                df["migrations"] = self._migrations
            else:
                df = rec.turns_frame() if name == "turns" else rec.instances_frame()
            self._frames[name] = df
        return self._frames[name]

    @property
    def turns(self) -> pd.DataFrame:
        return self._frame("turns")

    @property
    def programs(self) -> pd.DataFrame:
        return self._frame("programs")

    @property
    def instances(self) -> pd.DataFrame:
        return self._frame("instances")

    def tables(self) -> dict[str, pa.Table]:
        """The three output tables, as ``pyarrow.Table.from_pandas`` would give them from the DataFrames."""
        out = {}
        for name in ("turns", "programs", "instances"):
            cols = self.columns(name)
            out[name] = (
                tables.to_arrow(cols)
                if cols is not None
                else pa.Table.from_pandas(self._frame(name), preserve_index=False)
            )
        for name, extra in self.extra.items():
            out[name] = extra if isinstance(extra, pa.Table) else tables.to_arrow(extra)
        return out

    def write(self, out_dir: str | os.PathLike[str]) -> dict[str, Path]:
        """Write turns/programs/instances.parquet, summary.json and config.toml (Parquet atomically)."""
        out = Path(out_dir)
        sink = self._rec.sink
        paths = write_tables(out, self.tables()) if sink is None else {n: Path(q) for n, q in sink.paths.items()}
        texts = [
            ("summary.json", json.dumps(self.summary, indent=2, sort_keys=True) + "\n"),
            ("config.toml", to_toml(self.config)),
        ]
        if self.decisions is not None:
            texts.append(("decisions.jsonl", "".join(json.dumps(d, sort_keys=True) + "\n" for d in self.decisions)))
        for name, text in texts:
            tmp = out / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, out / name)
            paths[name] = out / name
        return paths
