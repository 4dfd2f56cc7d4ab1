"""``calibrate --calibration``: the end-to-end fit of the per-step engine cost (thin shell over
:mod:`validation.e2e.fit_measured`)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from agentreplay.cli.output import console, err, fail, print_json, show


def calibrate_end_to_end(measured: list[Path], globs: list[str], out: Path | None, *, as_json: bool = False) -> None:
    """Fit on the cells matching ``globs`` among the end-to-end cells of ``measured`` (only those: the default
    ../shared sources are not read; :func:`validation.e2e.fit_measured.fit_measured`); print every cell's error
    before / after and the held-out MAPE; write the fitted values as JSON to ``out`` if given (the packaged
    catalogue is never rewritten by this mode); ``as_json``: print that JSON instead of the tables (notes go to
    stderr)."""
    from validation.e2e.fit_measured import fit_measured

    if not measured:
        raise fail(
            "--calibration fits on your own measured runs: pass them with --measured RUN (repeatable); the "
            "project's ../shared end-to-end cells are validation cells (validation/protocol/rules.py SPLIT) and are "
            "not read in this mode"
        )
    try:
        res = fit_measured(measured, globs, err.print if as_json else console.print)
    except ValueError as exc:  # validation.e2e.fit.FitError too
        raise fail(str(exc)) from None
    result = res.as_dict()
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
