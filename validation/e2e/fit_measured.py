"""``agentreplay calibrate --measured RUN... --calibration CELL_GLOB...``: the end-to-end fit of the per-step engine
cost (:mod:`validation.e2e.fit`) on a user's own measured sources, with the split they declare.

Every source is collected (:func:`validation.measured.collect_path`); its ``vllm-run`` serving runs and its
whole-model iteration cells are the candidates, one kind fitting at a time; a cell whose id matches a glob is a
calibration cell, every other one is held out. A cell collected from under the project's measurements
(:func:`validation.measured.default_root`) is a validation cell (``validation/protocol/rules.py`` SPLIT) and can
fit nothing: this mode reads only the sources it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from validation.e2e.fit import (
    FIT_METRICS,
    FitError,
    FitResult,
    fit,
    fit_iterations,
    iteration_cells_from_tables,
    runs_from_tables,
    split,
)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _collect(measured: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], set[str]]:
    """(the measured tables of every source in ``measured``, the cells collected from under the project's
    measurements)."""
    from validation.measured import Measured, collect_path, default_root

    data = Measured()
    protected: set[str] = set()
    for p in measured:
        known = set(data.table("cells")["cell_id"])
        collect_path(p, data)
        if _inside(p, default_root()):
            protected |= set(data.table("cells")["cell_id"]) - known
    return {**data.tables, "cells": data.table("cells")}, protected


def _unused(cells: pd.DataFrame, used: set[str], why: list[str]) -> str | None:
    """The note naming the cells that are neither serving runs nor iteration cells (None when there is none)."""
    other = sorted(set(cells["cell_id"].astype(str)) - used)
    if not other:
        return None
    return (
        f"not used: {len(other)} cell(s) that are neither vllm-run serving runs nor whole-model "
        f"iterations of a catalogue GPU and model: {other[:10]}{' ...' if len(other) > 10 else ''}"
        + (f"; {why[:3]}" if why else "")
    )


def fit_measured(
    measured: Sequence[Path], globs: Sequence[str], note: Callable[[str], object] = lambda _: None
) -> FitResult:
    """Fit the step cost on the cells of ``measured`` (sources any collector reads) whose ids match ``globs``;
    every other cell is held out (module docstring). Serving runs fit with :func:`~validation.e2e.fit.fit`,
    whole-model iteration cells with :func:`~validation.e2e.fit.fit_iterations`. ``note`` receives, before the
    fit, which cells are not used and the declared split. Raises FitError (or a collector's ValueError) naming
    the cells."""
    tables, protected = _collect(measured)
    runs = runs_from_tables(tables)
    iters, why = iteration_cells_from_tables(tables)
    unused = _unused(tables["cells"], {r.cell_id for r in runs} | {c.cell_id for c in iters}, why)
    if unused:
        note(unused)
    cal, held = split(runs, globs, require=False)
    cal_it, held_it = split(iters, globs, require=False)
    if not cal and not cal_it:
        split([*runs, *iters], globs)  # raises, naming the cells
    if cal and cal_it:
        raise FitError(
            "the calibration globs match both serving runs and whole-model iteration cells: fit one "
            "kind at a time (the other is then held out)"
        )
    bad = sorted(c.cell_id for c in (*cal, *cal_it) if c.cell_id in protected)
    if bad:
        raise FitError(
            f"{bad}: cells of the project's measurements are validation cells (validation/"
            "calibrate.py SPLIT) and cannot fit anything"
        )
    fitted_on = ", ".join(FIT_METRICS) if cal else "whole-model iteration times"
    note(
        f"declared split: {len(cal) + len(cal_it)} calibration cell(s) "
        f"{[c.cell_id for c in (*cal, *cal_it)]}, {len(held) + len(held_it)} held out "
        f"{[c.cell_id for c in (*held, *held_it)]}; fitting framework_overhead_ms and "
        f"per_seq_overhead_us on {fitted_on}"
    )
    return fit(cal, held, held_out_iterations=held_it) if cal else fit_iterations(cal_it, held_it, held)
