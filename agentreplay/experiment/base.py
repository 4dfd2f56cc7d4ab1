"""The Experiment seam: a named study that runs labelled variants of a base configuration on a trace and turns
their finished runs into tables and figures.

An experiment (:class:`Experiment`) is

- ``Params``: a frozen dataclass whose fields, each made with :func:`param` (default and a one-line doc), are its
  options: ``agentreplay fleet NAME --field-name VALUE`` (:mod:`agentreplay.experiment.params` parses the text by
  the field's type);
- ``configs(base, p)``: its variants, label -> :class:`~agentreplay.sim.config.SimConfig`, in the order its tables
  list them;
- ``analyse(results, p)``: tables (DataFrames) from the variants' finished runs
  (:class:`agentreplay.experiment.results.Results`); a table whose name starts with ``_`` is metadata for
  :meth:`render` (titles, notes), every other one is also written as ``NAME.parquet``;
- ``render(tables, out)``: Markdown and PNG figures written into ``out``; returns the paths written.

The runner (:mod:`agentreplay.experiment.runner`) runs every (variant, seed) cell on the sweep's executors and keeps
each finished cell as a ``simulate`` output folder, so an interrupted run resumes. The hooks below have defaults:
what a variant replays (:meth:`Experiment.workload`: the trace), how a cell runs (:meth:`Experiment.run`:
``simulate`` and write), which seeds run (:meth:`Experiment.default_seeds`: the configuration's) and what the
command line prints (:meth:`Experiment.views`: every table).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.experiment.results import Results
    from agentreplay.experiment.tables import View
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload
    from agentreplay.trace.io import Trace


def param(default: Any, doc: str, *, none: str | None = None) -> Any:
    """A ``Params`` field: its default and its one-line doc (the option's help). ``none``: what a None default
    means, said in the help as its default (e.g. ``"all"`` for "the first N programs")."""
    return field(default=default, metadata={"doc": doc, "none": none})


class Experiment(Protocol):
    """One study: see the module docstring. Subclass it to inherit the default hooks."""

    name: str  #: command name: ``agentreplay fleet NAME``
    summary: str  #: one line, listed by ``agentreplay fleet --help``
    description: str  #: what runs and what is reported (the command's help)
    example: str  #: one command line, shown in the help
    Params: type[Any]  #: a frozen dataclass of :func:`param` fields
    #: ``[hardware]`` values the command line starts from when it is not told (``--gpu``, ``--model``, ``--tp``)
    hardware: ClassVar[Mapping[str, Any]]
    #: names (glob patterns) of what the experiment wrote before output folders were marked, its signature first: an
    #: unmarked folder holding the signature and nothing else may be written (agentreplay.experiment.runner.claim)
    outputs: ClassVar[tuple[str, ...]] = ()
    #: the output-folder kind (:mod:`agentreplay.outdir`); None: ``fleet NAME``
    output_kind: ClassVar[str | None] = None

    def configs(self, base: SimConfig, p: Any) -> dict[str, SimConfig]:
        """The variants: label -> configuration, in table order (ValueError for options that make none)."""
        ...

    def analyse(self, results: Results, p: Any) -> dict[str, pd.DataFrame]:
        """The tables, from the variants' finished runs (metadata for :meth:`render` under names with ``_``)."""
        ...

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        """Markdown and figures written into ``out`` (the tables are written by the runner); the paths written."""
        ...

    def default_seeds(self, seed: int) -> list[int]:
        """The seeds every variant runs under when none are given: the configuration's seed."""
        return [seed]

    def workload(self, label: str, trace: Path, p: Any, seed: int) -> Trace | Workload:
        """What variant ``label`` replays under ``seed``: the compiled trace, read once per process."""
        from agentreplay.experiment.worker import cached_workload

        return cached_workload(trace)

    def run(self, label: str, workload: Trace | Workload, cfg: SimConfig, folder: Path) -> None:
        """Run one cell and write its output into ``folder`` (an empty folder): ``simulate`` and its tables."""
        from agentreplay.sim.run import simulate

        simulate(workload, cfg).write(folder)

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        """What the command line prints: every table that is not metadata, its cells as text."""
        from agentreplay.experiment.tables import plain_view

        return [plain_view(name, df) for name, df in tables.items() if not name.startswith("_")]


def params_dict(p: Any) -> dict[str, Any]:
    """``p``'s fields as a dict (tuples and dicts kept), for manifests and hashes."""
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
