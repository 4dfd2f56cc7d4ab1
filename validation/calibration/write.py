"""What ``agentreplay calibrate`` writes into a catalog folder (:class:`validation.catalog.Catalog`): the fitted
efficiencies into ``gpus.toml`` (everything else kept byte for byte), ``roofline.toml`` (the refined roofline),
``tables.toml`` (measured tables, with its index ``tables_index.json``: :func:`write_table_index`) and the summary
that becomes ``calibration.json``. Each file's text is built here and written through
:meth:`validation.catalog.Catalog.write` (a temporary name moved into place; the index likewise, beside its
``tables.toml``)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd

from agentreplay.perf import Efficiency
from agentreplay.perf.table import AllReduceTable, MeasuredTable, TableOrigin
from agentreplay.perf.table_index import index_path, index_text, parse_entries
from validation.calibration.data import SPLIT, ComponentData, mape, mape_table
from validation.calibration.fit import GpuFit
from validation.calibration.refined import RefinedFit
from validation.calibration.settings import BOUNDS, FIT_EXCLUDE, FIT_PARAMS, ROBUST_SCALE, STAGES, START
from validation.catalog import Catalog
from validation.components import profiles as C
from validation.measured import Measured

_FMT = {
    "kernel_overhead_us": 3,
    "allreduce_latency_us": 3,
    "gemm_m_half_tokens": 1,
    "elementwise_kernel_us": 3,
    "attn_kernel_us": 3,
    "attn_decode_seq_us": 4,
    "attn_decode_fixed_us": 3,
    "attn_prefill_m_half_tokens": 1,
}


def _block(fit: GpuFit, old_lines: list[str]) -> list[str]:
    """The new ``[gpu."x".efficiency]`` table: fitted keys first, then the old lines for keys not fitted."""
    head = f'[gpu."{fit.gpu}".efficiency]'
    if fit.calibrated_from:
        note = (
            f'# calibrated_from = "{fit.calibrated_from}": no profile of this GPU; kernel-level efficiencies '
            f"of {fit.calibrated_from} (agentreplay calibrate)"
        )
    else:
        note = (
            f"# calibrated by `agentreplay calibrate` on {fit.n_points} component points "
            "(split and fit errors: calibration.json)"
        )
    lines = [head, note]
    # a GPU fitted in the tile form drops its FLOP-form prefill efficiency (the [defaults] value prices the
    # decode FLOP bound, which the KV bytes dominate)
    replaced = set(fit.fitted) | (
        {"attn_prefill_efficiency"} if "attn_prefill_tile_efficiency" in fit.fitted else set()
    )
    for p in fit.fitted:
        v = getattr(fit.efficiency, p)
        lines.append(f"{p} = {round(v, _FMT.get(p, 4))!r}")
    dropping = False
    for ln in old_lines:
        if dropping and ln[:1].isspace() and ln.strip().startswith("#"):
            continue  # continuation comment of a dropped key
        key = ln.split("=", 1)[0].strip()
        dropping = ln.startswith("# calibrat") or key in replaced
        if not dropping:
            lines.append(ln)
    return lines


def gpus_toml(fits: dict[str, GpuFit], src: Catalog) -> str:
    """The ``gpus.toml`` of ``src`` with the efficiency tables of the fitted GPUs rewritten; everything else
    (specs, comments, other GPUs) kept byte for byte."""
    lines = src.gpus_file.read_text().splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = re.fullmatch(r'\[gpu\."([^"]+)"\.efficiency\]\s*', lines[i])
        if m and m.group(1) in fits:
            j = i + 1
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("["):
                j += 1
            out.extend(_block(fits[m.group(1)], lines[i + 1 : j]))
            i = j
            continue
        m = re.fullmatch(r'\[gpu\."([^"]+)"\]\s*', lines[i])
        if m and m.group(1) in fits and f'[gpu."{m.group(1)}".efficiency]' not in lines:
            j = i + 1  # no efficiency table yet: add one after the GPU's table
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("["):
                j += 1
            out.extend(lines[i:j])
            out.extend(_block(fits[m.group(1)], []))
            i = j
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out) + "\n"


def write_gpus(fits: dict[str, GpuFit], src: Catalog, dst: Catalog) -> Path:
    """:func:`gpus_toml` of ``src`` written as ``dst``'s ``gpus.toml`` (``dst`` may be ``src``)."""
    return dst.write("gpus.toml", gpus_toml(fits, src))


def with_efficiency(catalog: Catalog, gpu: str, eff: Efficiency, folder: Path) -> Catalog:
    """A copy of ``catalog`` in ``folder`` with ``gpu``'s whole efficiency table replaced by ``eff`` (written as
    ``agentreplay calibrate`` writes a fit: values rounded as in :data:`_FMT`); every other file the same."""
    fields = tuple(f.name for f in dataclasses.fields(Efficiency))
    fit = GpuFit(gpu=gpu, efficiency=eff, fitted=fields, prior=eff, n_points=0, cost=0.0)
    return catalog.copy(folder, gpus_toml({gpu: fit}, catalog))


def summary_json(fits: dict[str, GpuFit], ops: pd.DataFrame, data: ComponentData, measured: Measured) -> dict:
    table = mape_table(ops)
    gpus = {}
    for g, f in sorted(fits.items()):
        d = ops[ops["gpu"] == g]
        gpus[g] = {
            "efficiency": {k: round(v, 6) for k, v in dataclasses.asdict(f.efficiency).items()},
            "fitted": list(f.fitted),
            "calibrated_from": f.calibrated_from,
            "points": {r: int((d["role"] == r).sum()) for r in ("calibration", "validation")},
            "mape_pct": {r: _num(mape(d.loc[d["role"] == r, "rel_error"])) for r in ("calibration", "validation")},
            "mape_pct_by_group": {grp: {r: _num(v) for r, v in row.items()} for grp, row in table.loc[g].iterrows()}
            if g in table.index.levels[0]
            else {},
        }
    return {
        "schema_version": 1,
        "split": SPLIT,
        "fit_params": list(FIT_PARAMS),
        "bounds": {k: list(v) for k, v in BOUNDS.items()},
        "start": START,
        "robust_scale": ROBUST_SCALE,
        "stages": {name: list(params) for name, params in STAGES},
        "fit_excluded": sorted(f"{s}:{g}" for s, g in FIT_EXCLUDE),
        "max_points_per_curve": C.MAX_POINTS,
        "gpus": gpus,
        "skipped_cells": [{"cell_id": c, "reason": r} for c, r in data.skipped],
        "sources": [{k: o[k] for k in ("path", "collector", "cells")} for o in measured.origins],
    }


def _num(v: float) -> float | None:
    """Rounded for the JSON file; None for NaN (strict JSON has no NaN)."""
    return None if not np.isfinite(v) else round(float(v), 3)


def write_refinements(fits: dict[str, RefinedFit], dst: Catalog) -> Path:
    """``dst``'s ``roofline.toml``: the fitted parameters of each GPU (the rest: gpus.toml / plain-roofline
    defaults)."""
    lines = [
        "# Refined roofline (agentreplay.perf.table.RefinedPerfModel): written by `agentreplay calibrate`",
        "# (validation/calibration/settings.py REFINED_STAGES), fitted on the calibration split only",
        "# (calibration.json).",
        "# Efficiency keys here override gpus.toml for the refined roofline only; the plain PerfModel keeps",
        "# gpus.toml. Units in the key names; see the agentreplay.perf.table docstring for each parameter.",
        "",
    ]
    for g, f in sorted(fits.items()):
        lines.append(f'[gpu."{g}"]')
        lines.append(
            f'# calibrated_from = "{f.calibrated_from}"'
            if f.calibrated_from
            else f"# fitted on {f.n_points} component points"
        )
        lines += [f"{p} = {round(f.value(p), _FMT.get(p, 4))!r}" for p in f.fitted]
        lines.append("")
    return dst.write("roofline.toml", "\n".join(lines))


def _arr(values: object, fmt: str) -> str:
    return "[" + ", ".join(format(v, fmt) for v in values) + "]"  # type: ignore[attr-defined]


def _origin_lines(origin: TableOrigin | None) -> list[str]:
    """A deployment profile's engine, engine version and KV dtype (agentreplay.perf.loaders.TableOrigin)."""
    if origin is None or not origin.deployment_profile:
        return []
    return [
        f'engine = "{origin.engine}"',
        f'engine_version = "{origin.engine_version}"',
        f'kv_dtype = "{origin.kv_dtype}"',
    ]


def write_tables(
    tables: dict[str, MeasuredTable],
    dst: Catalog,
    allreduce: dict[str, AllReduceTable] | None = None,
    origins: dict[str, TableOrigin] | None = None,
) -> Path:
    """``dst``'s ``tables.toml``: one ``[table."gpu/model/tpN"]`` per table, seconds per layer (module docstring of
    agentreplay.perf.table), with the engine, its version and the KV dtype of a deployment profile (``origins``,
    :func:`validation.calibration.tables.shipped_origins`), and one ``[allreduce."gpu/tpN"]`` per all-reduce table
    (seconds per all-reduce); then its index beside it (:func:`write_table_index`)."""
    lines = [
        "# Measured per-layer tables for agentreplay.perf.table.TablePerfModel, written by `agentreplay calibrate`",
        "# (validation/calibration/tables.py shipped_tables) from the component profiles: seconds per layer of each",
        "# operator (per forward: embedding, final_layernorm, lm_head, sampler) against tokens (sequences",
        "# for lm_head / sampler); attention per layer by (tokens or batch, context); a table with an engine is",
        "# a deployment profile (the serving engine's own, per TP rank, no TP collective in it: shipped_origins),",
        "# the one `--perf auto` prices that exact deployment from;",
        "# all-reduce: seconds of one all-reduce over tp GPUs of one node against the bytes reduced "
        "(shipped_allreduce).",
        "",
    ]
    for key, a in sorted((allreduce or {}).items()):
        lines += [
            f'[allreduce."{key}"]',
            f'source = "{a.name}"',
            f'gpu = "{a.gpu}"',
            f"tp = {a.tp}",
            f"bytes = {_arr(a.nbytes, 'd')}",
            f"seconds = {_arr(a.seconds, '.5g')}",
            "",
        ]
    for key, t in sorted(tables.items()):
        lines += [
            f'[table."{key}"]',
            f'source = "{t.name}"',
            f'gpu = "{t.gpu}"',
            f'model = "{t.model}"',
            f"tp = {t.tp}",
            f'dtype = "{t.dtype}"',
            *_origin_lines((origins or {}).get(key)),
        ]
        for op, (x, sec) in sorted(t.ops.items()):
            order = np.argsort(np.asarray(x), kind="stable")
            lines += [
                f'[table."{key}".op.{op}]',
                f"tokens = {_arr(np.asarray(x)[order], 'd')}",
                f"seconds = {_arr(np.asarray(sec)[order], '.5g')}",
            ]
        for part, names in (("attention_prefill", ("tokens", "context")), ("attention_decode", ("batch", "context"))):
            v = getattr(t, part)
            if v is not None:
                lines += [
                    f'[table."{key}".{part}]',
                    f"{names[0]} = {_arr(v[0], 'd')}",
                    f"{names[1]} = {_arr(v[1], 'd')}",
                    f"seconds = {_arr(v[2], '.5g')}",
                ]
        lines.append("")
    path = dst.write("tables.toml", "\n".join(lines))
    write_table_index(path)
    return path


def write_table_index(tables: Path) -> Path:
    """The index of the ``tables.toml`` at ``tables`` (:mod:`agentreplay.perf.table_index`: per table its
    deployment and origin, and the digest of the file), written beside it: what ``--perf auto`` reads instead of
    parsing every table. The entries are parsed from the file as written, so the index says what the file says.
    Written to a temporary name, then moved into place. Returns the index's path."""
    data = Path(tables).read_bytes()
    text = index_text(parse_entries(tables), data)
    dst = index_path(tables)
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(dst)
    return dst
