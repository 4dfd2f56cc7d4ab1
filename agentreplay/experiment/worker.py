"""What runs where a cell runs (a worker process of the sweep's pool, a Dask worker, or this process): one cell in,
its output folder out.

The cell's output is written into a temporary folder beside its final place and renamed into place when the run
has finished, so a folder under the store is always a finished cell (an interrupted or failed cell leaves none).
The trace is read once per process and path (:func:`cached_trace`, :func:`cached_workload`; a trace rewritten on
disk is read again), so a cell ships only its configuration.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentreplay.features.base import load

if TYPE_CHECKING:
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload
    from agentreplay.trace.io import Trace


def _stamp(trace: Path) -> tuple[str, tuple[int, ...]]:
    """The cache key of a trace folder: its resolved path and its tables' modification times."""
    p = Path(trace).resolve()
    times = tuple(f.stat().st_mtime_ns for f in sorted(p.glob("*.parquet"))) if p.is_dir() else ()
    return str(p), times


@lru_cache(maxsize=4)
def _trace(key: tuple[str, tuple[int, ...]]) -> Trace:
    from agentreplay.trace.io import read_trace

    return read_trace(key[0])


@lru_cache(maxsize=4)
def _workload(key: tuple[str, tuple[int, ...]]) -> Workload:
    from agentreplay.sim.workload import load_workload

    return load_workload(key[0])


def cached_trace(trace: Path) -> Trace:
    """The canonical trace at ``trace`` (frames: what a run needs to read extra columns, e.g. a class column)."""
    return _trace(_stamp(trace))


def cached_workload(trace: Path) -> Workload:
    """The trace at ``trace`` compiled for the simulator."""
    return _workload(_stamp(trace))


def run_cell(ref: str, params: Any, trace: str, cfg: SimConfig, label: str, seed: int, store: str, key: str) -> str:
    """Run cell ``key`` (variant ``label`` of the experiment at ``ref`` under ``seed``) into ``store/key``;
    returns ``key``. Raises what the run raised (the runner decides about retries)."""
    exp = load(ref)
    folder = Path(store) / key
    Path(store).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".tmp", dir=store))
    try:
        workload = exp.workload(label, Path(trace), params, seed)
        exp.run(label, workload, cfg, tmp)
        os.chmod(tmp, 0o755)  # mkdtemp creates 0700; outputs are ordinary shareable folders
        if folder.exists():  # the same cell finished meanwhile (two runs into one folder): keep the newer
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return key
