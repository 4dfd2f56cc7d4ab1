"""Run the study: every experiment as a sweep on one executor, then one results table.

Each experiment's sweep writes its own folder under ``WORK/<experiment>/`` (resumable: rerunning skips the cells
already done, see :mod:`agentreplay.sweep.runner`). The study table joins them, one row per cell, with the
experiment, the finding, the line name (``group_name``) and the seed; it is what the report and figures read.

``wall_s`` of an experiment is host time (it describes the run, never enters simulated state); it is kept in
``WORK/timings.json`` from the run that actually ran the cells, so a resumed run still reports it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from agentreplay.sim.workload import Workload
from agentreplay.study.experiments import GROUPS, Experiment, experiments
from agentreplay.study.spec import StudyOptions, tool_s_per_program, write_bimodal
from agentreplay.sweep import Executor, SpecError, SweepProgress, parse_spec, run_sweep
from agentreplay.sweep.store import ResultStore
from agentreplay.sweep.worker import load_workload

TIMINGS = "timings.json"


@dataclass(slots=True)
class StudyRun:
    results: pd.DataFrame  #: one row per cell of every experiment
    experiments: list[Experiment]
    timings: dict[str, dict[str, Any]]  #: experiment -> {"cells", "ran", "wall_s", "executor"}
    failed: list[dict[str, Any]] = field(default_factory=list)
    options: StudyOptions | None = None


def plan(opts: StudyOptions, work: str | Path) -> list[Experiment]:
    """The experiments, with the bimodal tool model written to ``WORK/bimodal-tools.json`` (workers read it)."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    model = write_bimodal(work / "bimodal-tools.json")
    return experiments(opts, load_workload(opts.trace), model.resolve())


def run_study(
    opts: StudyOptions,
    work: str | Path,
    executor: Executor,
    *,
    only: list[str] | None = None,
    progress: Callable[[Experiment], SweepProgress | None] | None = None,
) -> StudyRun:
    """Run every experiment (or those named in ``only``) on ``executor``; returns the joined results."""
    work = Path(work)
    exps = plan(opts, work)
    if only:
        unknown = sorted(set(only) - {e.name for e in exps})
        if unknown:
            raise ValueError(f"unknown experiment(s) {unknown}; known: {', '.join(e.name for e in exps)}")
        exps = [e for e in exps if e.name in only]
    timings = _read_timings(work)
    frames, failed = [], []
    for exp in exps:
        spec = parse_spec(exp.spec, base_dir=work)
        try:
            outcome = run_sweep(spec, work / exp.name, executor, progress=progress(exp) if progress else None)
        except SpecError as exc:
            raise SpecError(
                f"{exc}. The study's {exp.name} experiment changed since that folder was written: "
                f"delete {work / exp.name} or use another --work"
            ) from None
        ran = outcome.ok + outcome.failed
        if ran:  # keep the timing of the run that ran the cells
            timings[exp.name] = {
                "cells": outcome.total,
                "ran": ran,
                "wall_s": outcome.wall_s,
                "executor": executor.description,
            }
        failed += [{**f, "experiment": exp.name} for f in outcome.failures]
        frames.append(_frame(exp, spec, work / exp.name, load_workload(opts.trace)))
    _write_json(work / TIMINGS, timings)
    results = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return StudyRun(results, exps, timings, failed, opts)


def _frame(exp: Experiment, spec: Any, folder: Path, workload: Workload) -> pd.DataFrame:
    files = ResultStore(folder / "results", spec.params).files()
    df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    names = {c.cell_id: GROUPS[exp.group](c.config) for c in spec.cells}
    tools = {c.cell_id: tool_s_per_program(workload, c.config) for c in spec.cells}
    df.insert(0, "experiment", exp.name)
    df.insert(1, "finding", exp.finding)
    df.insert(2, "group_name", df["cell_id"].map(names))
    df["tool_s_per_program"] = df["cell_id"].map(tools)
    df["jct_serving_mean_s"] = df["jct_mean_s"] - df["tool_s_per_program"]
    x = df[exp.x] if exp.x in df.columns else pd.Series(float("nan"), index=df.index)
    df["x"] = pd.to_numeric(x.map(exp.x_values) if exp.x_values else x, errors="coerce")  # NaN: not a number
    return df


def _read_timings(work: Path) -> dict[str, dict[str, Any]]:
    path = work / TIMINGS
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc}); delete it to rerun the timings") from None


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
