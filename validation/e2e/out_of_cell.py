"""End-to-end errors out of cell: each end-to-end run replayed as if its GPU, or its model, had no profile.

The component-level leave-one-GPU-out / leave-one-model-out errors (:mod:`validation.protocol.crossval`) say how the
kernel-level parameters transfer; a user renting a GPU asks how the *end-to-end* figures transfer. Here every
simulated end-to-end cell with a timing source (``vllm-run``, ``llmperf``) is replayed three ways, with the
cell's own handler (:func:`validation.e2e.cells.vllm_run`, :func:`validation.e2e.llmperf.llmperf`) and the plain
roofline pricer the end-to-end table uses:

- ``shipped``: the catalogue as shipped (the row of the end-to-end table);
- ``logo``: the cell's GPU priced with what the catalogue would hold for it without its profile
  (:func:`validation.protocol.crossval.logo_efficiency`: the donor GPU's kernel-level parameters, the rest at
  ``[defaults.efficiency]``);
- ``lomo``: the cell's GPU refitted on its calibration cells of the *other* models
  (:func:`validation.protocol.crossval.lomo_efficiency`); possible where that GPU profiles two or more models,
  one of them the cell's.

Every cell here is a validation cell: nothing is chosen from these rows. The replays differ only in the GPU's
efficiency table, written into a temporary copy of the catalogue
(:func:`validation.calibration.write.with_efficiency`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.perf import Efficiency
from validation.calibration import calibrate as K
from validation.catalog import PACKAGED, Catalog
from validation.e2e.llmperf import llmperf
from validation.e2e.vllm import vllm_run
from validation.protocol import crossval as X
from validation.report import headline

#: Sources replayed out of cell, and their handler.
HANDLERS: Final[dict[str, Callable[..., tuple[list[dict], dict[str, Any]]]]] = {
    "vllm-run": vllm_run,
    "llmperf": llmperf,
}
MODES: Final = ("shipped", "logo", "lomo")


def _replay(cell: pd.Series, tables: dict[str, pd.DataFrame], catalog: Catalog) -> list[dict]:
    rows, _ = HANDLERS[cell["source"]](cell, tables, catalog)
    return rows


def cells_out_of_cell(tables: dict[str, pd.DataFrame], catalog: Catalog = PACKAGED) -> pd.DataFrame:
    """The end-to-end cells this module replays (sources in :data:`HANDLERS`, GPU in the catalogue)."""
    cells = tables["cells"]
    known = set(catalog.gpus())
    sel = cells[(cells["kind"] == "end-to-end") & cells["source"].isin(list(HANDLERS))]
    return sel[sel["gpu"].isin(known)].reset_index(drop=True)


def out_of_cell_rows(
    tables: dict[str, pd.DataFrame],
    data: K.ComponentData,
    catalog: Catalog = PACKAGED,
    shipped: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per (cell, metric, mode): ``mode, donor, cell_id, source, gpu, model, dtype, metric, measured,
    simulated, rel_error, judged``; a cell that cannot be replayed in a mode gets one row with ``note`` and no
    metric. ``shipped``: the end-to-end table's rows of these cells (replayed again when absent)."""
    cells = cells_out_of_cell(tables, catalog)
    logo = X.logo_efficiencies(data, catalog)
    out: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="agentreplay-ooc-") as tmp:
        for _, cell in cells.iterrows():
            g, m = str(cell["gpu"]), str(cell["model"])
            base = {"cell_id": cell["cell_id"], "source": cell["source"], "gpu": g, "model": m, "dtype": cell["dtype"]}
            if shipped is not None and len(shipped) and (shipped["cell_id"] == cell["cell_id"]).any():
                own = shipped[shipped["cell_id"] == cell["cell_id"]].to_dict("records")
            else:
                own = _replay(cell, tables, catalog)
            out.extend({**r, **base, "mode": "shipped", "donor": ""} for r in own)
            effs: dict[str, tuple[Efficiency | None, str, str]] = {}
            if g in logo:
                effs["logo"] = (logo[g][1], logo[g][0], "")
            else:
                effs["logo"] = (None, "", f"{g} has no own profile fit or no donor GPU")
            models = X.lomo_models(data, g)
            lomo = X.lomo_efficiency(data, g, m, catalog)
            effs["lomo"] = (
                lomo,
                "",
                ""
                if lomo is not None
                else (
                    f"{g}'s calibration cells profile {', '.join(models) or 'no model'}: no other model to refit on"
                    if models == [m]
                    else f"{g} has no calibration cell of {m}"
                ),
            )
            for mode, (eff, donor, why) in effs.items():
                if eff is None:
                    out.append({**base, "mode": mode, "donor": donor, "note": why})
                    continue
                changed = K.with_efficiency(catalog, g, eff, Path(tmp) / f"{mode}-{g}")
                out.extend({**r, **base, "mode": mode, "donor": donor} for r in _replay(cell, tables, changed))
    df = pd.DataFrame(out)
    if len(df) and "measured" in df:
        df["rel_error"] = df["simulated"] / df["measured"] - 1
    return df


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """MAPE (%) of the judged metrics per GPU, dtype, metric family and mode (columns ``shipped``, ``logo``,
    ``lomo``), with the number of cells; the throughputs fixed by construction are not judged."""
    if not len(rows) or "metric" not in rows:
        return pd.DataFrame()
    r = rows[rows["metric"].notna()]
    if "judged" in r:
        r = r[r["judged"].fillna(True).astype(bool)]
    r = r.assign(family=headline.family(r["metric"]), ape=100.0 * r["rel_error"].abs())
    t = r.groupby(["gpu", "dtype", "family", "mode"]).agg(mape_pct=("ape", "mean"), cells=("cell_id", "nunique"))
    wide = t["mape_pct"].unstack("mode").reindex(columns=list(MODES))
    wide["cells"] = t["cells"].groupby(level=[0, 1, 2]).max()
    return wide.reset_index()


def as_summary(rows: pd.DataFrame) -> dict[str, Any]:
    """The ``summary.json`` entry ``protocol.e2e_out_of_cell`` (rendered by
    :func:`validation.protocol.render.render_protocol_markdown`): the per-family MAPE table, the donors, and why a mode
    could not be replayed."""
    s = summary(rows)
    donors: dict[str, str] = {}
    why: list[str] = []
    if len(rows) and "donor" in rows:
        donors = {
            g: d
            for g, d in rows.loc[rows["mode"] == "logo", ["gpu", "donor"]].itertuples(index=False)
            if isinstance(d, str) and d
        }
    if len(rows) and "note" in rows:
        r = rows[rows["metric"].isna()] if "metric" in rows else rows
        why = sorted({f"{x.gpu} {x.mode}: {x.note}" for x in r.itertuples() if isinstance(x.note, str) and x.note})
    table = [
        {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in r.items()}
        for r in s.to_dict("records")
    ]
    return {"table": table, "donors": dict(sorted(donors.items())), "not_replayed": why}
