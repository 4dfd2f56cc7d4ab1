"""Run a sweep: skip finished cells, submit the rest to an executor, stream each finished cell to Parquet.

Guarantees:
- resumable: a cell whose ``ok`` row is on disk is not run again (failed cells are);
- a failed cell (an exception in the cell, or its worker dying) is retried; if every attempt fails it is
  recorded with ``status = failed`` and the last error, never dropped, and the other cells still run;
- an output folder belongs to one sweep: rerunning a spec whose trace, base config or parameter set differ
  fails before anything runs (cell ids hash only the overrides and the seed).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentreplay.sim.config import from_dict, to_toml
from agentreplay.sweep.executors import Executor
from agentreplay.sweep.spec import Cell, SpecError, SweepSpec
from agentreplay.sweep.store import ResultStore
from agentreplay.sweep.worker import failure, run_cell

MANIFEST = "sweep.json"


class SweepProgress(Protocol):
    """Callbacks the runner makes (the CLI draws a progress bar with them)."""

    def start(self, total: int, skipped: int, todo: int) -> None: ...

    def retry(self, cell: Cell, error: str) -> None: ...

    def done(self, row: dict[str, Any]) -> None: ...


@dataclass(slots=True)
class SweepOutcome:
    out: Path
    total: int  #: cells in the spec
    skipped: int  #: cells already ok on disk
    ok: int = 0  #: cells run now and ok
    failed: int = 0  #: cells run now whose every attempt failed
    retried: int = 0  #: cells that needed more than one attempt
    submitted: int = 0  #: attempts submitted (cells run + retries)
    wall_s: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)  #: the failed rows

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def prepare(spec: SweepSpec, out: str | Path) -> tuple[ResultStore, list[Cell]]:
    """Check the folder belongs to this sweep, write the manifest, return the store and the cells to run."""
    out = Path(out)
    manifest = out / MANIFEST
    if manifest.exists():
        try:
            old = json.loads(manifest.read_text()).get("fingerprint")
        except (OSError, ValueError) as exc:
            raise SpecError(f"{manifest}: unreadable ({exc})") from None
        if old != spec.fingerprint:
            raise SpecError(
                f"{out} holds results of a different sweep (trace, base config or swept parameters "
                f"differ: fingerprint {old} != {spec.fingerprint}); choose another --out"
            )
    out.mkdir(parents=True, exist_ok=True)
    _write_text(manifest, json.dumps(manifest_of(spec), indent=2, default=str) + "\n")
    _write_text(out / "base-config.toml", to_toml(from_dict(spec.base)))
    store = ResultStore(out / "results", spec.params)
    done = store.ok_ids()
    return store, [c for c in spec.cells if c.cell_id not in done]


def manifest_of(spec: SweepSpec) -> dict[str, Any]:
    """What the report (and a human) needs to read the results: parameters in spec order, cells, the spec."""
    return {
        "fingerprint": spec.fingerprint,
        "trace": str(spec.trace),
        "seeds": list(spec.seeds),
        "params": [
            {"path": p.path, "column": p.column, "short": p.short, "kind": p.kind, "values": list(p.values)}
            for p in spec.params
        ],
        "cells": [
            {"cell_id": c.cell_id, "label": c.label, "seed": c.seed, "group": c.group, "overrides": c.overrides}
            for c in spec.cells
        ],
        "spec": spec.raw,
    }


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    executor: Executor,
    *,
    progress: SweepProgress | None = None,
    max_attempts: int = 2,
) -> SweepOutcome:
    """Run every unfinished cell of ``spec`` on ``executor``, writing ``out/results/``; returns the counts."""
    t0 = time.perf_counter()
    store, todo = prepare(spec, out)
    outcome = SweepOutcome(Path(out), len(spec.cells), len(spec.cells) - len(todo))
    if progress:
        progress.start(outcome.total, outcome.skipped, len(todo))
    trace = str(spec.trace)
    attempts: Counter[str] = Counter()
    batch = todo
    while batch:
        pending = {executor.submit(run_cell, trace, cell.config): cell for cell in batch}
        outcome.submitted += len(pending)
        batch = []
        for fut in executor.as_completed(pending):
            cell = pending[fut]
            attempts[cell.cell_id] += 1
            try:
                result = fut.result()
            except Exception as exc:  # the worker died or the result could not come back
                result = failure(exc)
            if result["status"] != "ok" and attempts[cell.cell_id] < max_attempts:
                batch.append(cell)
                if progress:
                    progress.retry(cell, result["error"])
                continue
            row = row_of(spec, cell, result, attempts[cell.cell_id])
            store.write(row, cell.group)
            if row["status"] == "ok":
                outcome.ok += 1
            else:
                outcome.failed += 1
                outcome.failures.append(row)
            outcome.retried += attempts[cell.cell_id] > 1
            if progress:
                progress.done(row)
    store.normalize()
    outcome.wall_s = time.perf_counter() - t0
    return outcome


def row_of(spec: SweepSpec, cell: Cell, result: dict[str, Any], attempts: int) -> dict[str, Any]:
    """One results row: identity, the swept parameters as columns, then the figures."""
    row: dict[str, Any] = {
        "cell_id": cell.cell_id,
        "label": cell.label,
        "seed": cell.seed,
        "status": result["status"],
        "error": result["error"],
        "attempts": attempts,
        "wall_s": result["wall_s"],
    }
    row.update(
        {
            p.column: json.dumps(cell.overrides[p.path]) if p.kind == "list" else cell.overrides[p.path]
            for p in spec.params
        }
    )
    row.update({k: v for k, v in result["figures"].items() if k not in row})
    return row


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
