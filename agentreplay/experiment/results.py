"""What an experiment's analysis reads: its finished cells, each a ``simulate`` output folder on disk.

A cell is one variant under one seed (:class:`Run`); :class:`Results` maps each variant's label, in the order of
``configs``, to its runs in seed order. Most studies compute their tables from one seed's runs:
:func:`over_seeds` calls such a function once per seed and combines the tables (with one seed, its tables as
they are): a table whose index is named (e.g. ``load`` and ``budget``) gets the mean of its numeric columns over
the seeds per index value and the first seed's other columns; a table without a named index (per-program rows,
ledgers) gets the seeds' rows stacked under a leading ``seed`` column.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from agentreplay.sim.config import SimConfig


@dataclass(frozen=True, slots=True)
class Run:
    """One finished cell: variant ``label`` under ``seed``, its output in ``folder`` (what ``simulate --out``
    writes: ``summary.json``, ``config.toml``, the Parquet tables, and whatever the experiment's run hook adds)."""

    label: str
    seed: int
    folder: Path
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def summary(self) -> dict[str, Any]:
        """The run's ``summary.json``."""
        if "summary" not in self._cache:
            self._cache["summary"] = self.json("summary")
        return self._cache["summary"]  # type: ignore[no-any-return]

    def json(self, name: str) -> Any:
        """``NAME.json`` of the run's folder."""
        return json.loads((self.folder / f"{name}.json").read_text())

    def table(self, name: str) -> pd.DataFrame:
        """``NAME.parquet`` of the run's folder as a DataFrame (``turns``, ``programs``, ``instances``, a
        mechanism's table such as ``footprint`` or ``failover``)."""
        import pandas as pd

        return pd.read_parquet(self.folder / f"{name}.parquet")

    def columns(self, name: str, names: list[str]) -> dict[str, np.ndarray]:
        """Some columns of ``NAME.parquet`` as NumPy arrays (rows in the order the run wrote them)."""
        import pyarrow.parquet as pq

        t = pq.read_table(self.folder / f"{name}.parquet", columns=names)
        return {c: t.column(c).to_numpy() for c in names}

    def config(self) -> SimConfig:
        """The configuration the cell ran (``config.toml``)."""
        from agentreplay.sim.config import load

        return load(self.folder / "config.toml")


@dataclass(frozen=True, slots=True)
class Results(Mapping[str, tuple[Run, ...]]):
    """The finished cells of one experiment run: label -> runs in seed order; the trace, the base configuration
    the variants were made from and the seeds."""

    runs: dict[str, tuple[Run, ...]]
    trace: Path
    base: SimConfig
    seeds: tuple[int, ...]

    def __getitem__(self, label: str) -> tuple[Run, ...]:
        return self.runs[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def first(self, label: str) -> Run:
        """Variant ``label``'s run under the first seed."""
        return self.runs[label][0]

    def by_seed(self) -> list[tuple[int, dict[str, Run]]]:
        """``(seed, {label: run})`` per seed, in seed order."""
        return [(s, {label: runs[i] for label, runs in self.runs.items()}) for i, s in enumerate(self.seeds)]


def over_seeds(
    results: Results, tables_of: Callable[[dict[str, Run]], dict[str, pd.DataFrame]]
) -> dict[str, pd.DataFrame]:
    """``tables_of`` applied to each seed's runs, the tables combined over the seeds (module docstring)."""
    per = [(seed, tables_of(runs)) for seed, runs in results.by_seed()]
    if len(per) == 1:
        return per[0][1]
    return {name: combine([(seed, tables[name]) for seed, tables in per]) for name in per[0][1]}


def combine(frames: list[tuple[int, pd.DataFrame]]) -> pd.DataFrame:
    """One table from the same table of several seeds (module docstring)."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_integer_dtype, is_numeric_dtype

    first = frames[0][1]
    if all(n is None for n in first.index.names):
        return pd.concat([df.assign(seed=seed)[["seed", *df.columns]] for seed, df in frames], ignore_index=True)
    stacked = pd.concat([df for _, df in frames])
    how = {c: "mean" if is_numeric_dtype(first[c]) and not is_bool_dtype(first[c]) else "first" for c in first.columns}
    levels = list(range(first.index.nlevels))
    out = stacked.groupby(level=levels, sort=False).agg(how)[list(first.columns)]
    for c in first.columns:  # a count equal in every seed stays an integer
        if is_integer_dtype(first[c]) and not is_bool_dtype(first[c]) and (out[c] % 1 == 0).all():
            out[c] = out[c].astype(first[c].dtype)
    return out


def plain_json(x: object) -> object:
    """``x`` with numpy scalars as Python numbers and NaN as None (JSON has no NaN)."""
    if isinstance(x, Mapping):
        return {str(k): plain_json(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain_json(v) for v in x]
    if hasattr(x, "item"):
        x = x.item()  # type: ignore[attr-defined]
    if isinstance(x, float) and x != x:
        return None
    return x
