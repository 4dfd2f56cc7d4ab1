"""Every tunable of the pricers and of the memory model, with its provenance (one of :data:`PROVENANCE`):
per GPU from the catalog (:func:`catalog_rows`: datasheet peaks, fitted, borrowed or hand-set efficiencies, the
refined roofline's fitted parameters) and the rest (:func:`global_rows`: the table pricer's tunables with their
cross-validation scores, the memory model, the fit settings, the protocol's own choices). The rules these rows
cite are declared in :mod:`validation.protocol.rules`."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from validation.calibration.settings import FIT_EXCLUDE, ROBUST_SCALE, SHARE_FLOOR, TILE_ARCHITECTURES
from validation.catalog import Catalog
from validation.protocol.rules import ALLREDUCE_CALIBRATION_GPUS, NEAREST_RULE

PROVENANCE: Final = ("fitted", "chosen by CV", "datasheet", "engine default", "hand-set", "borrowed")
CONSTANT_COLUMNS: Final = ("constant", "scope", "value", "provenance", "detail")


def _efficiency_comments(path: Path) -> dict[tuple[str, str], str]:
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
    catalog: Catalog,
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
    with open(catalog.gpus_file, "rb") as f:
        cat = tomllib.load(f)
    notes = _efficiency_comments(catalog.gpus_file)
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
                f"{src} too (tests/validation/protocol/test_protocol.py)",
            }
        )
    return rows


def global_rows(cv_scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Constant rows that are not per GPU: the table's tunables (with their CV scores), the memory model, the fit
    settings and the protocol's own choices. ``cv_scores``: :func:`validation.protocol.crossval.cv_scores` records."""
    from agentreplay.perf import catalog as cat
    from agentreplay.perf import memory, table, tiles
    from validation.components import profiles as C

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
