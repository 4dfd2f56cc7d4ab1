"""Build ``error_bands.json`` (read by :mod:`agentreplay.bands`) from the validation's end-to-end residuals.

Only judged metrics of end-to-end validation cells with the measured workload enter (no calibration cell, no
stand-in workload, no metric fixed by construction: :mod:`validation.report.headline`); one record per cell and metric
with its GPU class, model class, metric family and signed error (%). Splitwise whole-model iterations are not
serving metrics and do not enter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from agentreplay.bands import SCHEMA_VERSION, gpu_class, model_class
from validation.report import headline as H


def residuals(errors: pd.DataFrame) -> list[dict[str, Any]]:
    t = H.e2e_table(errors)
    t = t[t["judged"] & t["workload"].eq("measured") & ~t["metric"].isin(H.ITERATION_METRICS)]
    fam = H.family(t["metric"])
    return [
        {
            "cell_id": r.cell_id,
            "source": r.source,
            "gpu": r.gpu,
            "model": r.model,
            "gpu_class": gpu_class(str(r.gpu)),
            "model_class": model_class(str(r.model)),
            "metric": r.metric,
            "family": f,
            "error_pct": round(float(r.error_pct), 3),
            # every row of errors.parquet is the simulator's default pricer (the roofline), not a profile of the
            # cell's exact deployment: profiled replays are reported apart (profiled_regimes.parquet)
            "regime": "unprofiled",
        }
        for r, f in zip(t.itertuples(index=False), fam, strict=True)
    ]


def write(errors: pd.DataFrame, path: str | Path) -> Path:
    """Write the band file atomically; returns its path."""
    p = Path(path)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "what": "signed error % of judged end-to-end validation metrics "
        "(agentreplay validate); agentreplay.bands turns them into per-class bands",
        "residuals": residuals(errors),
    }
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, p)
    return p
