"""``calibrate --calibration``: the end-to-end fit of the per-step engine cost (thin shell over
:mod:`validation.e2e.fit`)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from agentreplay.cli.output import console, err, fail, print_json, show


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def calibrate_end_to_end(measured: list[Path], globs: list[str], out: Path | None, *, as_json: bool = False) -> None:
    """Fit on the cells matching ``globs`` among the end-to-end cells of ``measured`` (only those: the default
    ../shared sources are not read); print every cell's error before / after and the held-out MAPE; write the
    fitted values as JSON to ``out`` if given (the packaged catalogue is never rewritten by this mode); ``as_json``:
    print that JSON instead of the tables (notes go to stderr). A cell collected from under ../shared/measurements
    cannot be a calibration cell (validation/calibration/calibrate.py SPLIT)."""
    from validation.e2e.fit import (
        FIT_METRICS,
        FitError,
        fit,
        fit_iterations,
        iteration_cells_from_tables,
        runs_from_tables,
        split,
    )
    from validation.measured import Measured, collect_path, default_root

    if not measured:
        raise fail(
            "--calibration fits on your own measured runs: pass them with --measured RUN (repeatable); the "
            "project's ../shared end-to-end cells are validation cells (validation/protocol/rules.py SPLIT) and are "
            "not read in this mode"
        )
    note = err.print if as_json else console.print
    protected: set[str] = set()
    try:
        data = Measured()
        for p in measured:
            known = set(data.table("cells")["cell_id"])
            collect_path(p, data)
            if _inside(p, default_root()):
                protected |= set(data.table("cells")["cell_id"]) - known
        runs = runs_from_tables(data.tables)
        iters, why = iteration_cells_from_tables(data.tables)
        used = {r.cell_id for r in runs} | {c.cell_id for c in iters}
        other = sorted(set(data.table("cells")["cell_id"].astype(str)) - used)
        if other:
            note(
                f"not used: {len(other)} cell(s) that are neither vllm-run serving runs nor whole-model "
                f"iterations of a catalogue GPU and model: {other[:10]}{' ...' if len(other) > 10 else ''}"
                + (f"; {why[:3]}" if why else "")
            )
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
        res = fit(cal, held, held_out_iterations=held_it) if cal else fit_iterations(cal_it, held_it, held)
    except (FitError, ValueError) as exc:
        raise fail(str(exc)) from None
    result = {
        "calibration": res.calibration,
        "held_out": res.held_out,
        "start": res.start.as_dict(),
        "fitted": res.fitted.as_dict(),
        "mape_pct": {
            r: {"start": res.mape_pct(r, "start"), "fitted": res.mape_pct(r)} for r in ("calibration", "held-out")
        },
        "rows": res.rows,
    }
    if out is not None:
        out.write_text(json.dumps(result, indent=1) + "\n")
    if as_json:
        print_json(result)
        return
    t = Table(title="end-to-end cells: measured vs simulated (catalogue step cost -> fitted)")
    for col in ("cell", "role", "metric", "measured", "catalogue", "err %", "fitted", "err %"):
        t.add_column(col)
    for r in res.rows:
        t.add_row(
            r["cell_id"],
            r["role"],
            r["metric"],
            f"{r['measured']:.4g}",
            f"{r['start']:.4g}",
            f"{100 * (r['start'] / r['measured'] - 1):+.1f}",
            f"{r['fitted']:.4g}",
            f"{100 * (r['fitted'] / r['measured'] - 1):+.1f}",
        )
    show(t)
    console.print(
        f"step cost: catalogue {res.start.as_dict()} -> fitted "
        f"{ {k: round(v, 4) for k, v in res.fitted.as_dict().items()} } ({res.evaluations} evaluations)"
    )
    for role in ("calibration", "held-out"):
        before, after = res.mape_pct(role, "start"), res.mape_pct(role, "fitted")
        n = len({r["cell_id"] for r in res.rows if r["role"] == role})
        console.print(
            f"{role} MAPE over {n} cell(s), every row above: catalogue {before:.2f}% -> fitted {after:.2f}%"
            if after == after
            else f"{role}: no cell"
        )
    if out is not None:
        console.print(f"wrote {out}", markup=False, soft_wrap=True)
