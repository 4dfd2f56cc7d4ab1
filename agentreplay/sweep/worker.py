"""What runs in a worker process: one cell in, one small dict of figures out.

The trace is read and compiled once per worker process and kept by path, so a cell ships only its config
(a few hundred bytes) and the figures come back as plain Python scalars. A failure inside a cell is caught and
returned as data (``status`` failed with the error text), so the runner decides about retries.

``wall_s`` is the host time the simulation took; it describes the run, never enters simulated state.

The figures are the run's own: the headline figures' error bands (the validation's residuals, the same for every
cell of a deployment) and the saturation / reuse findings (text) that :func:`agentreplay.sim.simulate` adds to
a summary are not result columns (:data:`NOT_FIGURES`); a cell runs with both off.
"""

from __future__ import annotations

import math
import numbers
import time
import traceback
from pathlib import Path
from typing import Any, Final

from agentreplay.sim.config import from_dict
from agentreplay.sim.run import simulate
from agentreplay.sim.workload import Workload, compile_trace
from agentreplay.trace.io import read_trace

_WORKLOADS: dict[str, Workload] = {}
#: top-level summary sections that are not figures of the cell (module docstring): never result columns
NOT_FIGURES: Final = frozenset({"error_bands", "findings"})


def load_workload(trace: str | Path) -> Workload:
    """The compiled trace at ``trace``, read once per process."""
    key = str(Path(trace).resolve())
    workload = _WORKLOADS.get(key)
    if workload is None:
        workload = _WORKLOADS[key] = compile_trace(read_trace(key))
    return workload


def flatten_summary(summary: dict[str, Any], prefix: str = "", unit: str = "") -> dict[str, Any]:
    """Numeric leaves of a summary as flat columns: ``jct_s.mean`` -> ``jct_mean_s`` (the unit suffix moves to
    the end), ``cluster.num_gpu_blocks`` -> ``cluster_num_gpu_blocks``. Strings and lists are left out (the
    strings are config, which the results already hold as parameters), and so are the top-level sections of
    :data:`NOT_FIGURES`."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if not prefix and key in NOT_FIGURES:
            continue
        if isinstance(value, dict):
            stem, u = (key[:-2], "_s") if key.endswith("_s") else (key, unit)
            out.update(flatten_summary(value, f"{prefix}{stem}_", u))
        elif isinstance(value, numbers.Real):  # Python and NumPy scalars, bools included
            out[f"{prefix}{key}{unit}"] = value.item() if hasattr(value, "item") else value
    return out


def failure(exc: BaseException, wall_s: float = math.nan) -> dict[str, Any]:
    """The result of a cell that raised: the exception's type and message (and where it was raised)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return {"status": "failed", "error": f"{type(exc).__name__}: {exc}{where}", "wall_s": wall_s, "figures": {}}


def run_cell(trace: str, config: dict[str, Any]) -> dict[str, Any]:
    """Simulate one cell. Returns ``{"status", "error", "wall_s", "figures"}``; never raises for a cell error."""
    t0 = time.perf_counter()
    try:
        workload, cfg = load_workload(trace), from_dict(config)
        t0 = time.perf_counter()  # the cell's cost, without the once-per-process trace load
        result = simulate(workload, cfg, error_bands="none", findings=False)
    except Exception as exc:  # a cell's failure is data for the runner (retried, then recorded)
        return failure(exc, time.perf_counter() - t0)
    return {
        "status": "ok",
        "error": None,
        "wall_s": time.perf_counter() - t0,
        "figures": flatten_summary(result.summary),
    }
