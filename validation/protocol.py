"""The validation protocol of the component pricers, declared in one place.

**Cells, not points.** A *cell* is one profile cell (source, GPU, model, dtype, TP), one all-reduce curve (one
cluster, one GPU count), one Splitwise cell (GPU, model, TP) or one measured run. :func:`cell_role` gives each
cell one role, for every pricer:

- ``calibration``: TP=1 operator-profile cells (LLMServingSim v0 / perf, Vidur) and the 2- and 8-GPU all-reduce
  curves. Every fitted parameter and every chosen tunable comes from these cells only (the fits of
  :mod:`validation.calibrate`; the cross-validation of :mod:`validation.crossval`).
- ``validation``: TP>1 operator-profile cells, the 4-GPU all-reduce curves, every Splitwise whole-model cell and
  every measured end-to-end run. They fitted and chose nothing; they are looked at to report, never to choose.
- ``fidelity`` (pricer rows only, never a cell role): the table pricer rebuilt from every other point of a cell
  and judged on the points in between. That measures how well the table interpolates inside a cell it has
  measured (table fidelity), not how it predicts a cell it has not: it is reported apart from validation.

The RTX 4090's only profile cell (LLMServingSim perf, Llama-3.1-8B, TP=1) is a calibration cell as a whole. It is
the only Ada profile and the only profile of vLLM's decode attention on a consumer card; as a validation cell it
would leave the GPU no fitted parameter, so the RTX 4090 vLLM run (a measured end-to-end run, validation) would
judge borrowed parameters instead of the model. The GPU's out-of-profile error is its leave-one-GPU-out figure
(:mod:`validation.crossval`), and its validation the vLLM run.

The table pricer's validation is out-of-cell only: the TP=1 table of a cell scaled to the TP>1 cells of the same
source, GPU and model by the refined roofline's ratio, and the Splitwise iterations priced from the Vidur TP=1
table of the same GPU and model (scaled the same way) with the all-reduce curves of calibration GPU counts.

The tables ``agentreplay calibrate`` ships (catalog/tables.toml) come from calibration cells only: the TP=1
profile tables and the 2- and 8-GPU all-reduce curves; a TP>1 run's table pricer scales the TP=1 table.

Constants (:func:`catalog_rows`, :func:`global_rows`): every tunable of the pricers and of the memory model with
its provenance, one of :data:`PROVENANCE`; cross-validation, leave-one-GPU-out and leave-one-model-out live in
:mod:`validation.crossval`; :func:`validation.protocol_render.render_protocol_markdown` renders all of it.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agentreplay.perf import GpuSpec
from validation.calibrate_settings import FIT_EXCLUDE, ROBUST_SCALE, SHARE_FLOOR, TILE_ARCHITECTURES

CALIBRATION: Final = "calibration"
VALIDATION: Final = "validation"
FIDELITY: Final = "fidelity"
ROLES: Final = (CALIBRATION, VALIDATION, FIDELITY)
#: GPU counts of the all-reduce curves that calibrate (the 4-GPU curve between them validates).
ALLREDUCE_CALIBRATION_GPUS: Final = (2, 8)

SPLIT: Final = {
    CALIBRATION: "whole cells: TP=1 operator-profile cells (LLMServingSim v0 / perf, Vidur; the RTX 4090's only "
    "cell included, whole), and the 2- and 8-GPU all-reduce curves of one DGX node. Every fitted "
    "parameter and every tunable chosen by cross-validation comes from these cells only.",
    VALIDATION: "whole cells: TP>1 operator-profile cells, the 4-GPU all-reduce curves, every Splitwise "
    "whole-model cell, every measured end-to-end run. They fitted and chose nothing.",
    FIDELITY: "not a cell role: the table pricer rebuilt from every other point of a cell and judged on the points "
    "in between (in-cell interpolation, 'table fidelity'); reported apart, never as validation.",
}

#: The pricers compared on the component cells and what judges each (report section "Pricer comparison"); the
#: roles are those of this module (whole cells; ``fidelity`` = in-cell interpolation, not validation).
PRICERS: Final = {
    "roofline": "PerfModel with the gpus.toml efficiencies (what the simulator runs by default), fitted on the "
    "calibration cells; judged on the validation cells (validation.protocol)",
    "refined": "RefinedPerfModel with catalog/roofline.toml (GEMM saturation, per-class kernel costs, attention "
    "fixed and per-sequence costs), fitted on the same calibration cells, judged on the same validation "
    "cells",
    "table": "TablePerfModel, refined roofline as the fallback. Validation (out of cell): the TP=1 table of each "
    "cell (all its points) scaled to the TP>1 cells of the same source, GPU and model by the refined "
    "roofline's TP ratio; Splitwise whole-model iterations from the Vidur TP=1 table of the same GPU and "
    "model scaled the same way, with Vidur's all-reduce curve where its GPU count calibrates (2, 8; else "
    "the fallback's all-reduce); the 4-GPU all-reduce by the fallback (no table of a validation curve). "
    "Table fidelity (role 'fidelity', not validation): each cell's table rebuilt from every other point "
    "(attention: every other row and column of the grid; all-reduce: every other size) and judged on "
    "the points in between",
}


def source_of(cell_id: str) -> str:
    return cell_id.split("/", 1)[0]


def cell_role(cell_id: str, tp: int | None) -> str:
    """``calibration`` or ``validation`` for a whole component cell (module docstring); ``tp``: the cell's TP
    degree (the GPU count of an all-reduce curve). Raises ValueError for a cell of an unknown kind."""
    src = source_of(cell_id)
    if src == "splitwise":
        return VALIDATION
    if tp is None or (isinstance(tp, float) and math.isnan(tp)):
        raise ValueError(f"component cell {cell_id!r}: no TP degree / GPU count to give it a role")
    if "/network/" in cell_id:
        return CALIBRATION if int(tp) in ALLREDUCE_CALIBRATION_GPUS else VALIDATION
    if src in ("llmservingsim-v0", "llmservingsim-perf", "vidur"):
        return CALIBRATION if int(tp) == 1 else VALIDATION
    raise ValueError(f"component cell {cell_id!r}: source {src!r} has no declared role (validation/protocol.py)")


# ---------------------------------------------------------------------------------------------- nearest GPU
NEAREST_RULE: Final = (
    "the profiled GPU with the same interconnect class (NVLink / PCIe: datacenter or workstation "
    "part), then the same architecture, then the nearest (log bf16 peak, log memory bandwidth), "
    "in that order"
)


def nearest_gpu(target: GpuSpec, candidates: Iterable[GpuSpec]) -> str | None:
    """:data:`NEAREST_RULE`: the GPU whose fitted kernel-level parameters ``target`` borrows when it has no
    profile of its own (and, with ``target`` left out of ``candidates``, the leave-one-GPU-out donor)."""

    def key(c: GpuSpec) -> tuple[bool, bool, float]:
        d = math.hypot(
            math.log(c.bf16_tflops / target.bf16_tflops), math.log(c.mem_bandwidth_gbps / target.mem_bandwidth_gbps)
        )
        return (c.interconnect != target.interconnect, c.architecture != target.architecture, d)

    pool = [c for c in candidates if c.name != target.name]
    return min(pool, key=key).name if pool else None


# ---------------------------------------------------------------------------------------------- constants
PROVENANCE: Final = ("fitted", "chosen by CV", "datasheet", "engine default", "hand-set", "borrowed")
CONSTANT_COLUMNS: Final = ("constant", "scope", "value", "provenance", "detail")


def _efficiency_comments(path: str) -> dict[tuple[str, str], str]:
    """``(gpu or 'defaults', key) -> inline comment`` of the efficiency tables of a gpus.toml."""
    out: dict[tuple[str, str], str] = {}
    scope = None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for ln in text.splitlines():
        m = re.fullmatch(r'\[gpu\."([^"]+)"\.efficiency\]\s*', ln)
        if m or ln.strip() == "[defaults.efficiency]":
            scope = m.group(1) if m else "defaults"
            continue
        if ln.startswith("["):
            scope = None
        if scope and "=" in ln and not ln.lstrip().startswith("#"):
            key, rest = ln.split("=", 1)
            out[(scope, key.strip())] = rest.split("#", 1)[1].strip() if "#" in rest else ""
    return out


def catalog_rows(
    gpus_toml: str,
    calibration: Mapping[str, Any],
    refined: Mapping[str, Any],
    cells: Mapping[str, list[str]],
    nearest: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Constant rows of the GPU catalog: per GPU, every efficiency of the plain roofline (``gpus.toml``) and
    every refined-roofline parameter (``roofline.toml``), with provenance: ``fitted`` (on which calibration
    cells), ``borrowed`` (from which GPU, by :data:`NEAREST_RULE`), ``hand-set`` (the catalog's comment as the
    reason; "no reason given" where it has none) or the ``[defaults.efficiency]`` value; and the datasheet peaks.
    ``calibration``: calibration.json ``gpus``; ``refined``: its ``refined.gpus``; ``cells``: GPU -> its
    calibration cells."""
    with open(gpus_toml, "rb") as f:
        cat = tomllib.load(f)
    notes = _efficiency_comments(gpus_toml)
    defaults = cat.get("defaults", {}).get("efficiency", {})
    rows: list[dict[str, Any]] = []
    for g, spec in sorted(cat["gpu"].items()):
        for k in (
            "bf16_tflops",
            "fp8_tflops",
            "mem_bandwidth_gbps",
            "memory_gib",
            "interconnect_bw_gbps",
            "sm_count",
            "smem_per_sm_kib",
            "usable_memory_gib",
        ):
            if k in spec:
                rows.append(
                    {
                        "constant": k,
                        "scope": g,
                        "value": spec[k],
                        "provenance": "datasheet" if k != "usable_memory_gib" else "hand-set",
                        "detail": "gpus.toml (source cited beside the value)"
                        if k != "usable_memory_gib"
                        else "measured total memory as CUDA reports it (gpus.toml comment)",
                    }
                )
        own = spec.get("efficiency", {})
        fit = calibration.get(g, {})
        src = fit.get("calibrated_from")
        fitted = set(fit.get("fitted", ()))
        where = ", ".join(cells.get(src or g, [])) or "none"
        for k in sorted(set(defaults) | set(own)):
            v = own.get(k, defaults.get(k))
            if k in fitted and src:
                prov, det = "borrowed", f"fitted on {src}'s calibration cells ({NEAREST_RULE}): {where}"
            elif k in fitted:
                prov, det = "fitted", f"calibration cells: {where}"
            elif k in own:
                prov, det = "hand-set", notes.get((g, k)) or "no reason given in gpus.toml"
            else:
                prov, det = (
                    "hand-set",
                    "[defaults.efficiency] " + (notes.get(("defaults", k)) or "(reason in the gpus.toml header)"),
                )
            rows.append({"constant": k, "scope": g, "value": v, "provenance": prov, "detail": det})
        ref = refined.get(g, {})
        rsrc = ref.get("calibrated_from")
        for k, v in sorted(ref.get("fitted", {}).items()):
            rows.append(
                {
                    "constant": f"refined.{k}",
                    "scope": g,
                    "value": float(f"{v:.4g}"),
                    "provenance": "borrowed" if rsrc else "fitted",
                    "detail": (
                        f"fitted on {rsrc}'s calibration cells: {', '.join(cells.get(rsrc, []))}"
                        if rsrc
                        else f"calibration cells: {where}"
                    ),
                }
            )
    for g, src in sorted(nearest.items()):
        rows.append(
            {
                "constant": "NEAREST",
                "scope": g,
                "value": src,
                "provenance": "hand-set",
                "detail": f"the GPU {g} (no profile) borrows from; the declared rule ({NEAREST_RULE}) picks "
                f"{src} too (tests/validation/test_protocol.py)",
            }
        )
    return rows


def global_rows(cv_scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Constant rows that are not per GPU: the table's tunables (with their CV scores), the memory model, the fit
    settings and the protocol's own choices. ``cv_scores``: :func:`validation.crossval.cv_scores` records."""
    from agentreplay.perf import catalog as cat
    from agentreplay.perf import memory, table, tiles
    from validation import components as C

    def cv_detail(tunable: str) -> str:
        s = [r for r in cv_scores if r["tunable"] == tunable]
        if not s:
            return "no calibration fold"
        scores = ", ".join(f"{r['candidate']}: {r['cv_score_pct']:.2f}%" for r in s)
        return (
            f"candidates (CV score = mean over {s[0]['folds']} calibration cells of the held-out in-cell MAPE, "
            f"{s[0]['points']} points): {scores}; lowest wins"
        )

    rule = "log reference" if table.ATTENTION_ROWS_IN_REFERENCE else "log tokens"
    rows = [
        {
            "constant": "GEMM_TILE_TOKENS",
            "scope": "table pricer",
            "value": table.GEMM_TILE_TOKENS,
            "provenance": "chosen by CV",
            "detail": cv_detail("GEMM_TILE_TOKENS"),
        },
        {
            "constant": "ATTENTION_ROWS_IN_REFERENCE (prefill row rule)",
            "scope": "table pricer",
            "value": rule,
            "provenance": "chosen by CV",
            "detail": cv_detail("prefill-attention row rule"),
        },
        {
            "constant": "DEFAULT_ACTIVATION_RESERVE_GIB",
            "scope": "memory model",
            "value": memory.DEFAULT_ACTIVATION_RESERVE_GIB,
            "provenance": "hand-set",
            "detail": "history: back-solved from the RTX 4090 vLLM 0.19 run (a validation run: 0.9 * 23.516 GiB - "
            "14.957 GiB weights - 2588 blocks * 2 MiB); that run is replayed with its recorded block count, "
            "so its figures do not depend on it; runs without a recorded block count (LLMPerf) do. Not yet "
            "derived from vLLM's profile run (vllm/v1/worker/gpu_worker.py determine_available_memory: "
            "peak of a dummy forward at max_num_batched_tokens + non-torch memory)",
        },
        {
            "constant": "DEFAULT_GPU_MEMORY_UTILIZATION",
            "scope": "memory model",
            "value": memory.DEFAULT_GPU_MEMORY_UTILIZATION,
            "provenance": "engine default",
            "detail": "vLLM 0.19 CacheConfig.gpu_memory_utilization (the RTX 4090 run's engine); vLLM 0.32 "
            "vllm/config/cache.py CacheConfig defaults to 0.92",
        },
        {
            "constant": "DEFAULT_BLOCK_SIZE",
            "scope": "memory model",
            "value": memory.DEFAULT_BLOCK_SIZE,
            "provenance": "engine default",
            "detail": "vLLM's KV block size on CUDA (CacheConfig.block_size unset: "
            "16 tokens, vllm/platforms/cuda.py check_and_update_config)",
        },
        {
            "constant": "DRIVER_RESERVE_GIB",
            "scope": "catalog",
            "value": cat.DRIVER_RESERVE_GIB,
            "provenance": "hand-set",
            "detail": "memory CUDA does not report, where usable_memory_gib is not measured",
        },
        {
            "constant": "tiles.BLOCK_M / tile_shape",
            "scope": "refined roofline",
            "value": tiles.BLOCK_M,
            "provenance": "engine default",
            "detail": "FlashAttention-2 split-KV forward kernel tile (kBlockM)",
        },
        {
            "constant": "TILE_ARCHITECTURES",
            "scope": "calibration",
            "value": ", ".join(sorted(TILE_ARCHITECTURES)),
            "provenance": "engine default",
            "detail": "vLLM runs FA2 off Hopper (vllm/attention/utils/fa_utils.py get_flash_attn_version)",
        },
        {
            "constant": "FIT_EXCLUDE",
            "scope": "calibration",
            "value": len(FIT_EXCLUDE),
            "provenance": "hand-set",
            "detail": "HF-eager modules of LLMServingSim v0 ("
            + ", ".join(sorted(g for _, g in FIT_EXCLUDE))
            + "): not the fused serving kernels the model prices",
        },
        {
            "constant": "ROBUST_SCALE / SHARE_FLOOR",
            "scope": "calibration",
            "value": f"{ROBUST_SCALE} / {SHARE_FLOOR}",
            "provenance": "hand-set",
            "detail": "fit settings: soft-L1 scale on log residuals; smallest operator weight share",
        },
        {
            "constant": "MAX_POINTS / TABLE_POINTS",
            "scope": "calibration",
            "value": f"{C.MAX_POINTS} / {C.TABLE_POINTS}",
            "provenance": "hand-set",
            "detail": "points kept per curve (fit; shipped tables)",
        },
        {
            "constant": "ALLREDUCE_CALIBRATION_GPUS",
            "scope": "protocol",
            "value": str(ALLREDUCE_CALIBRATION_GPUS),
            "provenance": "hand-set",
            "detail": "the 2- and 8-GPU curves calibrate, the 4-GPU curve between them validates",
        },
        {
            "constant": "NEAREST_RULE",
            "scope": "protocol",
            "value": "rule",
            "provenance": "hand-set",
            "detail": NEAREST_RULE,
        },
    ]
    return rows
