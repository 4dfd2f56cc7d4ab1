"""``agentreplay validate``: simulate every measured cell, compare, write errors.parquet and the report.

``errors.parquet`` has one row per cell, metric and operating point: ``source, cell_id, gpu, model, dtype, tp,
metric, measured, simulated, rel_error, role`` (+ ``num_tokens, batch_size, context_tokens, bytes`` locating a
component point, and ``note``). ``rel_error = simulated / measured - 1`` (signed). ``role`` is ``calibration``
for component points that fitted the efficiencies (:data:`validation.calibration.calibrate.SPLIT`), else ``validation``.

Component metrics: ``layer_time_s`` (one decoder layer = the sum of the measured per-layer operators at
``num_tokens``, see :func:`validation.components.predict.layer_sums`), ``attention_prefill_s`` / ``attention_decode_s``,
``lm_head_s``, ``prefill_iteration_s`` / ``decode_iteration_s`` (Splitwise whole-model iterations) and
``all_reduce_s``. Operator-level rows (the fit diagnostics) go to ``component_ops.parquet``.

Pricer comparison (:data:`validation.protocol.rules.PRICERS`): the same component points priced by the default roofline,
the refined roofline and the measured-table pricer (and its GEMM-tile ablation), each judged under its own declared
split, go to ``pricers.parquet`` (metric rows, plus the RTX 4090 vLLM run and the LLMPerf RTX 3090 BF16 cells
replayed with each pricer) and ``pricer_ops.parquet`` (operator rows). What limits the table pricer (all-reduce
across GPU counts, the decode form) is summarised by :func:`validation.components.limits.table_limits`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from validation.calibration import calibrate as K
from validation.catalog import PACKAGED, Catalog
from validation.components import predict as CP
from validation.components import profiles as C
from validation.components.limits import prefill_forms, table_limits
from validation.components.pricers import pricer_rows
from validation.e2e import cells as e2e_cells
from validation.e2e import live, out_of_cell, peers
from validation.e2e import llmperf as e2e_llmperf
from validation.e2e.vllm import vllm_run_regimes
from validation.measured import Measured, default_root, load
from validation.protocol import outputs as protocol_outputs
from validation.report import bands, headline
from validation.report import data as report_data
from validation.report import render as report

COLUMNS: Final = [
    "source",
    "cell_id",
    "gpu",
    "model",
    "dtype",
    "tp",
    "metric",
    "measured",
    "simulated",
    "rel_error",
    "role",
    "num_tokens",
    "batch_size",
    "context_tokens",
    "bytes",
    "note",
    "judged",
]


def _cell_cols(df: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    info = cells.set_index("cell_id")
    for col in ("source", "model", "dtype"):
        df[col] = df["cell_id"].map(info[col])
    df["tp"] = df["cell_id"].map(info["tp"]).astype("Int64")
    return df


def component_rows(
    measured: Measured, catalog: Catalog = PACKAGED, data: K.ComponentData | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, str]]]:
    """(errors rows, operator-level rows, skipped cells) for every component cell on a catalog GPU."""
    data = data if data is not None else K.component_data(measured)
    known = set(catalog.gpus())
    effs = {g: catalog.gpu(g).efficiency for g in known}
    ops = K.op_errors(data, effs)
    src = {c: C.source_of(c) for c in ops["cell_id"].unique()}
    layer = CP.layer_sums(ops, ops["predicted_s"].to_numpy(), src)
    roles = ops.drop_duplicates(["cell_id", "num_tokens"]).set_index(["cell_id", "num_tokens"])["role"]
    layer["role"] = [
        roles.get((c, n), "validation") for c, n in zip(layer["cell_id"], layer["num_tokens"], strict=True)
    ]
    layer = layer.assign(metric="layer_time_s", note="ops: " + layer["ops"]).drop(columns="ops")
    att = ops[ops["group"].isin(["attention_prefill", "attention_decode", "lm_head"]) & (ops["probe"] != "tokens")]
    att = att.assign(metric=att["group"] + "_s", note="")
    parts = [layer, att.drop(columns=["group", "probe", "mult", "launches", "per_layer", "rel_error", "gpu", "tp"])]
    for g in sorted(known):
        gpu = dataclasses.replace(catalog.gpu(g), efficiency=effs[g])
        it = data.iterations[data.iterations["gpu"] == g].reset_index(drop=True)
        if len(it):
            pred = CP.predict_iterations(it, gpu, data.specs, data.tps, effs[g])  # type: ignore[arg-type]
            parts.append(
                it.assign(predicted_s=pred, metric=it["group"] + "_s", note="whole model, Splitwise")[
                    [
                        "cell_id",
                        "num_tokens",
                        "batch_size",
                        "context_tokens",
                        "measured_s",
                        "predicted_s",
                        "role",
                        "metric",
                        "note",
                    ]
                ]
            )
        ar = data.allreduce[data.allreduce["gpu"] == g].reset_index(drop=True)
        if len(ar):
            parts.append(
                ar.assign(predicted_s=CP.predict_allreduce(ar, gpu, effs[g]), metric="all_reduce_s", note="")[
                    ["cell_id", "bytes", "measured_s", "predicted_s", "role", "metric", "note"]
                ]
            )
    df = pd.concat([p for p in parts if len(p)], ignore_index=True)
    df = df.rename(columns={"measured_s": "measured", "predicted_s": "simulated"})
    df["gpu"] = df["cell_id"].map(data.cells.set_index("cell_id")["gpu"])
    df = _cell_cols(df, data.cells)
    return df, ops, data.skipped


def finish(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["rel_error"] = df["simulated"] / df["measured"] - 1.0
    for col in ("num_tokens", "batch_size", "context_tokens", "bytes"):
        df[col] = pd.array(df[col] if col in df else [None] * len(df), dtype="Int64")
    df["note"] = df["note"].fillna("") if "note" in df else ""
    # judged = False: a metric the replay fixes by construction (e.g. throughput under arrivals fitted to the
    # measured span); reported beside the others, never given a verdict
    df["judged"] = df["judged"].fillna(True).astype(bool) if "judged" in df else True
    df["tp"] = pd.array(df["tp"], dtype="Int64")
    return (
        df[COLUMNS]
        .sort_values(
            ["role", "source", "cell_id", "metric", "num_tokens", "context_tokens", "batch_size", "bytes"],
            kind="stable",
        )
        .reset_index(drop=True)
    )


def aggregates(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """MAPE (%) and signed mean error (%) per source, per metric and per GPU, split by role."""

    def agg(keys: list[str]) -> pd.DataFrame:
        g = df.groupby([*keys, "role"])["rel_error"]
        out = pd.DataFrame(
            {"n": g.size(), "mape_pct": g.apply(lambda e: np.mean(np.abs(e)) * 100), "mean_signed_pct": g.mean() * 100}
        )
        return out.reset_index()

    return {"source": agg(["source"]), "metric": agg(["source", "metric"]), "gpu": agg(["gpu", "source"])}


#: The steps of :func:`run`, with their wall time in seconds on the bundled data (2 loaded cores), so a progress
#: display can give an ETA from the shares.
STEPS: Final = (
    ("read the measured sources", 22),
    ("component cells", 1),
    ("pricer comparison", 24),
    ("end-to-end replays with every pricer", 2),
    ("end-to-end cells", 7),
    ("profiled and unprofiled regimes", 3),
    ("inference-perf runs out of configuration", 20),
    ("live-engine cells", 0.5),
    ("LLMPerf sensitivity to unrecorded settings", 24),
    ("protocol: CV, leave-one-GPU/model-out", 186),
    ("end to end out of cell", 4),
    ("report and figures", 9),
)
#: The measured tables the steps read.
TABLES: Final = ("cells", "component", "requests", "programs", "metrics", "peers")


@dataclass
class _Collected:
    """What the steps of :func:`run` collect, each list in the order the steps add to it."""

    parts: list[pd.DataFrame] = field(default_factory=list)  #: error rows (errors.parquet before :func:`finish`)
    skipped: list[tuple[str, str]] = field(default_factory=list)  #: (cell, reason) not compared
    pricer_parts: list[pd.DataFrame] = field(default_factory=list)  #: metric rows of every pricer
    ops: pd.DataFrame = field(default_factory=pd.DataFrame)  #: operator-level rows of the default pricer
    pricer_ops: pd.DataFrame = field(default_factory=pd.DataFrame)  #: operator-level rows of every pricer
    data: K.ComponentData | None = None  #: the component points; None when no component cell has any
    e2e_rows: pd.DataFrame = field(default_factory=pd.DataFrame)  #: the end-to-end cells' rows
    dists: dict[str, dict[str, Any]] = field(default_factory=dict)  #: per end-to-end cell: distributions
    summary: dict[str, Any] = field(default_factory=dict)  #: summary entries of the replays apart
    peers: pd.DataFrame = field(default_factory=pd.DataFrame)  #: inference-perf cells beside the peers' errors


def run(
    out: str | Path = "reports/latest",
    measured_paths: list[str] | None = None,
    *,
    defaults: bool = True,
    quick: bool = False,
    catalog: Catalog = PACKAGED,
    live_paths: list[str | Path] | None = None,
    progress: Callable[[str, float], None] | None = None,
    bundled_only: bool = False,
) -> dict[str, Any]:
    """Validate and write ``errors.parquet``, ``component_ops.parquet``, ``report.md``, ``report.html``,
    ``error_bands.json`` and the figures into ``out``. Returns the headline summary (also written as
    ``summary.json``). ``progress(step, weight)`` is called as each step of :data:`STEPS` begins."""
    out = Path(out)
    if bundled_only:  # only what ships with the project: the committed live-engine comparisons
        defaults, measured_paths = False, []
        live_paths = list(live.default_paths()) if live_paths is None else live_paths
    elif defaults and not default_root().is_dir():
        raise ValueError(
            f"measured data not found: {default_root()} does not exist. validate reads the development set from "
            "../shared/measurements beside the project (a clone of the project with its shared/ folder beside it; "
            "AGENTREPLAY_MEASUREMENTS names another folder). Pass --bundled-only to validate only the bundled "
            "live-engine comparisons, or --no-default-sources --measured DIR for your own runs."
        )
    out.mkdir(parents=True, exist_ok=True)
    weights = dict(STEPS)

    def step(name: str) -> None:
        if progress is not None:
            progress(name, weights[name])

    step("read the measured sources")
    measured = load(measured_paths, defaults=defaults)
    tables = {name: measured.table(name) for name in TABLES}
    got = _Collected()
    _components(measured, tables, catalog, step, got)
    _end_to_end(tables, out, quick, catalog, step, got)
    step("live-engine cells")
    if live_paths is None:  # the committed live runs count as default sources
        live_paths = list(live.default_paths()) if defaults else []
    live_rows = live.rows([Path(p) for p in live_paths])
    if len(live_rows):
        got.parts.append(live_rows)
    errors, pricers = _write_rows(out, got)
    step("LLMPerf sensitivity to unrecorded settings")
    sensitivity = pd.DataFrame() if quick else e2e_llmperf.llmperf_sensitivity(tables, catalog)
    if len(sensitivity):
        sensitivity.to_parquet(out / "llmperf_sensitivity.parquet", index=False)
    summary = _summary(errors, pricers, sensitivity, catalog, got)
    summary["sources"] = measured.origins
    if got.data is not None and len(got.data.ops):
        step("protocol: CV, leave-one-GPU/model-out")
        summary["protocol"] = _protocol(out, tables, pricers, quick, catalog, step, got)
    step("report and figures")
    bands.write(errors, out / "error_bands.json")
    report.write(
        out,
        errors,
        got.ops,
        got.dists,
        aggregates(errors),
        summary,
        quick=quick,
        pricers=pricers,
        pricer_ops=got.pricer_ops,
        catalog=catalog,
        sensitivity=sensitivity,
        inference_perf_peers=got.peers,
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    return summary


def _components(
    measured: Measured,
    tables: dict[str, pd.DataFrame],
    catalog: Catalog,
    step: Callable[[str], None],
    got: _Collected,
) -> None:
    """The component cells (default pricer) and, where operators were profiled, the pricer comparison."""
    if not (tables["cells"]["kind"] == "component").any():
        return
    data = K.component_data(measured)
    if not (len(data.ops) or len(data.iterations) or len(data.allreduce)):
        got.skipped += data.skipped  # every component cell was skipped (e.g. a model the catalog cannot price)
        return
    got.data = data
    step("component cells")
    comp, got.ops, skipped = component_rows(measured, catalog, data)
    got.parts.append(comp)
    got.skipped += skipped
    if len(data.ops):  # the pricer comparison is per operator (whole-model iterations alone have none)
        step("pricer comparison")
        met, got.pricer_ops = pricer_rows(data, catalog)
        got.pricer_parts.append(met)


def _end_to_end(
    tables: dict[str, pd.DataFrame],
    out: Path,
    quick: bool,
    catalog: Catalog,
    step: Callable[[str], None],
    got: _Collected,
) -> None:
    """The end-to-end cells: with every pricer, with the default one, in both profiled regimes, and the
    inference-perf runs out of configuration."""
    step("end-to-end replays with every pricer")
    alt = e2e_cells.alternatives(tables, catalog)
    if len(alt) and "metric" in alt:
        alt = alt[alt["metric"].notna()]
        got.pricer_parts.append(
            alt[["pricer", "source", "cell_id", "gpu", "metric", "measured", "simulated", "rel_error", "role"]]
        )
    step("end-to-end cells")
    got.e2e_rows, got.dists, e2e_skipped = e2e_cells.run_all(tables, catalog, agent=not quick)
    got.skipped += e2e_skipped
    if len(got.e2e_rows):
        rows = got.e2e_rows
        rows["num_tokens"] = rows["batch_size"] = rows["context_tokens"] = rows["bytes"] = None
        got.parts.append(rows)
    step("profiled and unprofiled regimes")
    regimes = _profiled_regimes(tables, catalog, got.data)
    if len(regimes):
        regimes.to_parquet(out / "profiled_regimes.parquet", index=False)
        got.summary["profiled_regimes"] = _records(regimes.drop(columns=["note"], errors="ignore"))
    step("inference-perf runs out of configuration")
    ip_out = _inference_perf(tables, out, quick, catalog)
    if ip_out is not None:
        got.parts.append(ip_out["rows"])
        got.skipped += ip_out["apart"]
        got.summary["inference_perf"] = ip_out["summary"]
        got.peers = ip_out["peers"]


def _write_rows(out: Path, got: _Collected) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(errors, pricers)``: the rows collected, written as errors.parquet, component_ops.parquet,
    pricers.parquet and pricer_ops.parquet (those that have rows). Raises ValueError when no cell was compared."""
    if not got.parts:
        why = "; ".join(f"{c}: {r}" for c, r in got.skipped) or "no cell of a kind the validation simulates"
        raise ValueError(f"no measured cell could be simulated ({why})")
    errors = finish(pd.concat(got.parts, ignore_index=True))
    errors.to_parquet(out / "errors.parquet", index=False)
    if len(got.ops):
        got.ops.to_parquet(out / "component_ops.parquet", index=False)
    pricers = pd.concat(got.pricer_parts, ignore_index=True) if got.pricer_parts else pd.DataFrame()
    if len(pricers):
        pricers.to_parquet(out / "pricers.parquet", index=False)
    if len(got.pricer_ops):
        got.pricer_ops.to_parquet(out / "pricer_ops.parquet", index=False)
    return errors, pricers


def _summary(
    errors: pd.DataFrame, pricers: pd.DataFrame, sensitivity: pd.DataFrame, catalog: Catalog, got: _Collected
) -> dict[str, Any]:
    """The headline summary of the rows (:mod:`validation.report.data`, :mod:`validation.report.headline`)."""
    burst = (
        sensitivity[
            (sensitivity["setting"] == "arrivals")
            & (sensitivity["value"] == "burst")
            & (sensitivity["dtype"] == "bf16")
        ]
        if len(sensitivity)
        else sensitivity
    )
    summary = report_data.headline(errors, burst)
    summary.update(report_data.pricer_headline(pricers))
    if got.data is not None and len(got.pricer_ops):
        limits = table_limits(got.data, pricers, got.pricer_ops, catalog)
        summary["table_limits"] = {name: _records(frame) for name, frame in limits.items()}
        summary["prefill_forms"] = _records(prefill_forms(got.data, catalog))
    summary.update(_llmperf_floors(got.dists))
    summary.update(got.summary)
    summary["skipped"] = [{"cell_id": c, "reason": r} for c, r in got.skipped]
    summary["end_to_end"] = headline.summarise(errors, summary["skipped"])
    return summary


def _llmperf_floors(dists: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The LLMPerf cells whose measured mean TTFT is below the compute floor, and the share of the measured span
    the run's floor takes, per GPU and dtype (summary entries; none without LLMPerf cells)."""
    floors = [d for d in dists.values() if "ttft_floor_s" in d]
    if not floors:
        return {}
    shares: dict[str, list[float]] = {}
    for d in floors:
        shares.setdefault(d["gpu_dtype"], []).append(100.0 * d["run_floor_s"] / d["measured_span_s"])
    return {
        "llmperf_ttft_below_compute_floor": {
            "cells": len(floors),
            "below": sum(d["measured_ttft_mean_s"] < d["ttft_floor_s"] for d in floors),
        },
        "llmperf_run_floor_share_pct": {
            k: {"cells": len(v), "min": min(v), "max": max(v)} for k, v in sorted(shares.items())
        },
    }


def _protocol(
    out: Path,
    tables: dict[str, pd.DataFrame],
    pricers: pd.DataFrame,
    quick: bool,
    catalog: Catalog,
    step: Callable[[str], None],
    got: _Collected,
) -> dict[str, Any]:
    """The validation protocol's outputs (:mod:`validation.protocol`): constants with their provenance, CV
    scores, leave-one-GPU-out / leave-one-model-out, table fidelity and, unless ``quick``, the end-to-end cells
    out of cell; written as ``protocol_*.parquet``; returns the ``protocol`` summary entry (rendered by
    :func:`validation.protocol.render.render_protocol_markdown`)."""
    assert got.data is not None
    frames, summary = protocol_outputs.outputs(got.data, pricers, catalog, lomo=not quick)
    if not quick:
        step("end to end out of cell")
        ooc = out_of_cell.out_of_cell_rows(tables, got.data, catalog, shipped=got.e2e_rows)
        frames["e2e_out_of_cell"] = ooc
        summary["e2e_out_of_cell"] = out_of_cell.as_summary(ooc)
    for name, frame in frames.items():
        if len(frame):
            frame.to_parquet(out / f"protocol_{name}.parquet", index=False)
    return summary


def _profiled_regimes(tables: dict[str, pd.DataFrame], catalog: Catalog, data: Any) -> pd.DataFrame:
    """Every ``vllm-run`` cell priced from its deployment profile and as an unprofiled GPU (DESIGN §5)."""
    cells = tables["cells"]
    runs = cells[cells["source"] == "vllm-run"]
    frames = []
    for _, cell in runs.iterrows():
        try:
            frames.append(vllm_run_regimes(cell, tables, catalog, data))
        except ValueError as exc:  # a deployment the simulator does not model: listed by run_all already
            frames.append(pd.DataFrame([{"cell_id": cell["cell_id"], "pricer": "-", "note": str(exc)}]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _inference_perf(tables: dict[str, pd.DataFrame], out: Path, quick: bool, catalog: Catalog) -> dict[str, Any] | None:
    """The inference-perf cells (:mod:`validation.e2e.peers`): out-of-configuration rows for the headline (stage
    cells), the peer comparison and targets for the summary, the runs apart; None when the sources have none."""
    cells = tables["cells"]
    if not (cells["source"] == "inference-perf").any():
        return None
    ooc, ins, apart = peers.replay(tables, catalog, in_sample=not quick)
    keep = ["source", "cell_id", "gpu", "model", "dtype", "tp", "metric", "measured", "simulated", "role", "note"]
    rows = ooc[ooc["stage_cell"]][keep].copy() if len(ooc) else pd.DataFrame(columns=keep)
    for col in ("num_tokens", "batch_size", "context_tokens", "bytes"):
        rows[col] = None
    peer = peers.peer_table(ooc, ins, tables.get("peers", pd.DataFrame()))
    for name, df in (
        ("inference_perf_out_of_config", ooc),
        ("inference_perf_in_sample", ins),
        ("inference_perf_peers", peer),
    ):
        if len(df):
            df.to_parquet(out / f"{name}.parquet", index=False)
    summary = {
        "targets": _records(peers.targets(ooc, ins, peer)),
        "per_configuration": _records(peers.per_configuration(ooc, ins, peer)),
        "peers_summary": _records(peers.summary_rows(peer)),
        "apart": [{"cell_id": c, "reason": r} for c, r in apart],
        "runs": int(ooc["cell_id"].str.rsplit("/", n=1).str[0].nunique()) if len(ooc) else 0,
        "in_sample": not quick,
    }
    return {"rows": rows, "apart": apart, "summary": summary, "peers": peer}


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows: floats rounded, NaN as None."""
    return [
        {
            k: (None if isinstance(v, float) and not np.isfinite(v) else round(v, 3) if isinstance(v, float) else v)
            for k, v in r.items()
        }
        for r in df.to_dict("records")
    ]
