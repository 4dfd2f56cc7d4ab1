"""What a plan cell computes, and how the sweep runner is made to run it.

The sweep runner (:func:`agentreplay.sweep.run_sweep`) submits :func:`agentreplay.sweep.worker.run_cell` for each
cell; its figures are the simulation summary, which holds latency quantiles but not the per-program JCTs a goodput
at a deadline needs. :class:`PlanExecutor` wraps any sweep executor (local pool or Dask) and submits
:func:`run_plan_cell` in its place: the same simulation, the same figures, plus ``goodput_<D>s`` for each
deadline the objective names. Everything else (resuming, retries, the Parquet results) is the sweep runner's.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from agentreplay.plan.slo import goodput_column
from agentreplay.sweep import worker


def run_plan_cell(trace: str, config: dict[str, Any], deadlines_s: tuple[float, ...] = ()) -> dict[str, Any]:
    """:func:`agentreplay.sweep.worker.run_cell` plus the goodput at each of ``deadlines_s`` (seconds): programs
    with JCT <= D over programs attempted (those the admission removed count as missed). Never raises for a cell
    error: a failure comes back as data, as from ``run_cell``."""
    from agentreplay.fleet.goodput import goodput
    from agentreplay.sim.config import from_dict
    from agentreplay.sim.run import simulate

    t0 = time.perf_counter()
    try:
        workload, cfg = worker.load_workload(trace), from_dict(config)
        t0 = time.perf_counter()  # the cell's cost, without the once-per-process trace load
        result = simulate(workload, cfg, error_bands="none", findings=False)  # (no result column: worker.NOT_FIGURES)
        figures = worker.flatten_summary(result.summary)
        if deadlines_s:
            programs = result.columns("programs")
            assert programs is not None
            jct = programs["jct_s"]
            removed = int((result.summary.get("rejected") or {}).get("programs_removed") or 0)
            for d in deadlines_s:
                figures[goodput_column(d)] = goodput(jct, np.full(len(jct), d), removed=removed)["goodput"]
    except Exception as exc:  # a cell's failure is data for the runner (retried, then recorded)
        return worker.failure(exc, time.perf_counter() - t0)
    return {"status": "ok", "error": None, "wall_s": time.perf_counter() - t0, "figures": figures}


class PlanExecutor:
    """A sweep executor that runs :func:`run_plan_cell` (with the objective's goodput deadlines bound) wherever
    the runner asks for :func:`agentreplay.sweep.worker.run_cell`; everything else passes through to ``inner``.
    The bound function is a :func:`functools.partial` of a module-level function, so it pickles by reference
    for the spawn pool and for Dask alike."""

    def __init__(self, inner: Any, deadlines_s: Iterable[float] = ()) -> None:
        self.inner = inner
        self.deadlines_s = tuple(sorted({float(d) for d in deadlines_s if math.isfinite(d)}))
        self.description = inner.description
        self.workers = inner.workers

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        if fn is worker.run_cell:
            fn = functools.partial(run_plan_cell, deadlines_s=self.deadlines_s)
        return self.inner.submit(fn, *args)

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        return self.inner.as_completed(futures)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()
