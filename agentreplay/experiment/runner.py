"""Run an experiment: its cells on an executor, then its tables and figures, all in one output folder.

A cell is one variant of ``configs(base, p)`` under one seed. Layout of the output folder ``OUT``:

- ``OUT/sim-runs/<cell>/``: each finished cell, a ``simulate`` output folder (:mod:`agentreplay.experiment.worker`
  renames it into place when the run has finished). A cell's name is its label, its seed and a hash of what it
  runs (experiment, label, seed, configuration, parameters, trace), so rerunning the same command into the same
  folder runs only the cells it does not hold yet (resume), and any change of option runs the cells it changes;
- ``OUT/NAME.parquet`` per table, and what the experiment's ``render`` writes (Markdown, PNG figures);
- ``OUT/experiment.json`` (the experiment, its parameters, seeds, trace and cells) and ``OUT/base-config.toml``.

Guarantees: the folder is written in place (it is resumable), so it is claimed first: it must be empty, marked as
agentreplay's (:mod:`agentreplay.outdir`), or hold what this experiment wrote before folders were marked (its
``outputs``: the first of them, and nothing else). When a run completes, what an
earlier run with other options left there (cells, tables, figures) is removed: the folder holds this run. A cell
whose run raises a ``ValueError`` (a configuration or the trace that cannot run) stops the experiment with the
message, naming the cell; any other failure (a worker that died) is retried once. On Ctrl-C (KeyboardInterrupt)
the finished cells stay, for a rerun to resume.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentreplay.experiment.base import Experiment, params_dict
from agentreplay.experiment.results import Results, Run, plain_json

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.sim.config import SimConfig

STORE = "sim-runs"
MANIFEST = "experiment.json"
BASE_CONFIG = "base-config.toml"


class ExperimentError(ValueError):
    """An experiment that cannot run or finish; the message names the folder, the cell or the value."""


@dataclass(frozen=True, slots=True)
class Cell:
    label: str
    seed: int
    config: SimConfig
    key: str  #: the folder name under ``OUT/sim-runs``


@dataclass(slots=True)
class Outcome:
    out: Path
    cells: list[Cell]
    skipped: int  #: cells already finished in the folder
    ran: int = 0
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list)  #: tables, Markdown and figures written


class Progress(Protocol):
    """Callbacks the runner makes (the command line prints with them)."""

    def start(self, cells: int, skipped: int, where: str) -> None: ...

    def done(self, cell: Cell) -> None: ...

    def retry(self, cell: Cell, error: str) -> None: ...


class Silent:
    """A :class:`Progress` that says nothing."""

    def start(self, cells: int, skipped: int, where: str) -> None:
        return None

    def done(self, cell: Cell) -> None:
        return None

    def retry(self, cell: Cell, error: str) -> None:
        return None


def ref_of(exp: Experiment) -> str:
    """``module:attribute`` of the experiment object (how a worker process finds it)."""
    module = type(exp).__module__
    for name, value in vars(sys.modules[module]).items():
        if value is exp:
            return f"{module}:{name}"
    raise ExperimentError(f"experiment {exp.name!r}: not a module-level object of {module}, so no worker can load it")


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+]+", "-", label).strip("-").lower() or "variant"


def plan(exp: Experiment, base: SimConfig, p: Any, seeds: Sequence[int], trace: Path) -> list[Cell]:
    """Every (variant, seed) cell, variants in ``configs`` order, then seeds; ValueError for a bad variant."""
    configs = exp.configs(base, p)
    if not configs:
        raise ExperimentError(f"experiment {exp.name!r}: these options make no variant")
    what = {"experiment": exp.name, "params": params_dict(p), "trace": str(Path(trace).resolve())}
    cells = []
    for label, cfg in configs.items():
        for seed in seeds:
            c = cfg.replace(seed=seed)  # type: ignore[arg-type]
            blob = json.dumps(
                {**what, "label": label, "seed": seed, "config": c.to_dict()}, sort_keys=True, default=str
            )
            digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
            cells.append(Cell(label, seed, c, f"{slug(label)}.seed{seed}.{digest}"))
    return cells


def kind_of(exp: Experiment) -> str:
    """The output-folder kind (:mod:`agentreplay.outdir`) the experiment writes."""
    return exp.output_kind or f"fleet {exp.name}"


def claim(out: Path, exp: Experiment) -> None:
    """Refuse (:class:`ExperimentError`) a folder this run may not write into (module docstring)."""
    from agentreplay.outdir import OutputDirError, check

    try:
        check(out, kind_of(exp))
        return
    except OutputDirError as exc:
        if _legacy(out, exp.outputs):
            return
        raise ExperimentError(str(exc)) from None


def _legacy(out: Path, outputs: tuple[str, ...]) -> bool:
    """``out`` was written by the experiment before output folders were marked: it holds the first of its outputs
    (its signature) and nothing but its outputs."""
    names = [e.name for e in out.iterdir()] if out.is_dir() else []
    return (
        bool(outputs)
        and any(fnmatch.fnmatchcase(n, outputs[0]) for n in names)
        and all(any(fnmatch.fnmatchcase(n, pat) for pat in outputs) for n in names)
    )


def run_experiment(
    exp: Experiment,
    p: Any,
    base: SimConfig,
    trace: Path,
    out: Path,
    *,
    seeds: Sequence[int] | None = None,
    workers: int | None = None,
    dask: str | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """Run ``exp`` with parameters ``p`` on ``trace`` from ``base`` into ``out`` (module docstring)."""
    from agentreplay.experiment.executor import executor_for
    from agentreplay.outdir import mark

    progress = progress or Silent()
    seeds = list(dict.fromkeys(seeds if seeds else exp.default_seeds(base.seed)))
    if not Path(trace).is_dir():
        raise ExperimentError(f"trace {trace}: no such folder (a canonical trace: programs.parquet, turns.parquet)")
    cells = plan(exp, base, p, seeds, trace)
    out = Path(out)
    claim(out, exp)
    store = out / STORE
    todo = [c for c in cells if not (store / c.key).is_dir()]
    outcome = Outcome(out, cells, len(cells) - len(todo))
    executor = executor_for(workers, dask)
    out.mkdir(parents=True, exist_ok=True)
    try:
        mark(out, kind_of(exp))
        _write_manifest(out, exp, p, base, trace, seeds, cells)
        progress.start(len(cells), outcome.skipped, executor.description)
        with executor:
            outcome.ran = _run_cells(executor, ref_of(exp), p, trace, store, todo, progress)
    finally:
        if out.is_dir():
            mark(out, kind_of(exp))
    runs: dict[str, list[Run]] = {}
    for c in cells:
        runs.setdefault(c.label, []).append(Run(c.label, c.seed, store / c.key))
    results = Results({k: tuple(v) for k, v in runs.items()}, Path(trace), base, tuple(seeds))
    outcome.tables = exp.analyse(results, p)
    outcome.paths = finish(out, exp, outcome.tables, {c.key for c in cells})
    return outcome


def _run_cells(executor: Any, ref: str, p: Any, trace: Path, store: Path, todo: list[Cell], progress: Progress) -> int:
    """Run ``todo`` (module docstring: what fails, what is retried); returns how many ran."""
    from agentreplay.experiment.worker import run_cell

    attempts: dict[str, int] = {}
    batch, ran = todo, 0
    while batch:
        pending = {
            executor.submit(run_cell, ref, p, str(trace), c.config, c.label, c.seed, str(store), c.key): c
            for c in batch
        }
        batch = []
        for fut in executor.as_completed(pending):
            cell = pending[fut]
            attempts[cell.key] = attempts.get(cell.key, 0) + 1
            try:
                fut.result()
            except ValueError as exc:  # the configuration or the trace: running it again fails again
                raise ExperimentError(f"{cell.label} (seed {cell.seed}): {exc}") from None
            except Exception as exc:  # the worker died, or the result could not come back
                if attempts[cell.key] >= 2:
                    raise ExperimentError(f"{cell.label} (seed {cell.seed}) failed twice: {exc!r}") from None
                progress.retry(cell, f"{type(exc).__name__}: {exc}")
                batch.append(cell)
                continue
            ran += 1
            progress.done(cell)
    return ran


def _write_manifest(
    out: Path, exp: Experiment, p: Any, base: SimConfig, trace: Path, seeds: list[int], cells: list[Cell]
) -> None:
    from agentreplay.sim.config import to_toml

    doc = {
        "experiment": exp.name,
        "params": plain_json(params_dict(p)),
        "trace": str(trace),
        "seeds": seeds,
        "cells": [{"label": c.label, "seed": c.seed, "folder": f"{STORE}/{c.key}"} for c in cells],
    }
    _write_text(out / MANIFEST, json.dumps(doc, indent=2, default=str) + "\n")
    _write_text(out / BASE_CONFIG, to_toml(base))


def finish(out: Path, exp: Experiment, tables: dict[str, pd.DataFrame], keys: set[str]) -> list[Path]:
    """Write the tables and the rendered files, then remove what this run did not write (module docstring)."""
    from agentreplay.experiment.tables import write
    from agentreplay.outdir import MARKER

    paths = write(out, tables)
    paths += exp.render(tables, out)
    keep = {STORE, MANIFEST, BASE_CONFIG, MARKER} | {Path(p).relative_to(out).parts[0] for p in paths}
    _prune(out, keep)
    _prune(out / STORE, keys)
    return paths


def _prune(folder: Path, keep: set[str]) -> None:
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def link_folder(src: Path, dst: Path, names: Callable[[Path], bool] = lambda p: True) -> Path:
    """``dst`` holding hard links to the files of ``src`` that ``names`` accepts (copies where the file system
    has no hard links): a finished cell shown at a place of its own without a second copy on disk."""
    if dst.exists():
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
    dst.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and names(f):
            link_file(f, dst / f.name)
    return dst


def link_file(src: Path, dst: Path) -> Path:
    """``dst`` a hard link to ``src`` (a copy where hard links are not possible), replacing what was there."""
    if dst.exists() or dst.is_symlink():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst
