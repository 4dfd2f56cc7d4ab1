"""The validation protocol of the component pricers, declared in one place.

**Cells, not points.** A *cell* is one profile cell (source, GPU, model, dtype, TP), one all-reduce curve (one
cluster, one GPU count), one Splitwise cell (GPU, model, TP) or one measured run. :func:`cell_role` gives each
cell one role, for every pricer:

- ``calibration``: TP=1 operator-profile cells (LLMServingSim v0 / perf, Vidur) and the 2- and 8-GPU all-reduce
  curves. Every fitted parameter and every chosen tunable comes from these cells only (the fits of
  :mod:`validation.calibration.calibrate`; the cross-validation of :mod:`validation.protocol.crossval`).
- ``validation``: TP>1 operator-profile cells, the 4-GPU all-reduce curves, every Splitwise whole-model cell and
  every measured end-to-end run. They fitted and chose nothing; they are looked at to report, never to choose.
- ``fidelity`` (pricer rows only, never a cell role): the table pricer rebuilt from every other point of a cell
  and judged on the points in between. That measures how well the table interpolates inside a cell it has
  measured (table fidelity), not how it predicts a cell it has not: it is reported apart from validation.

The RTX 4090's only profile cell (LLMServingSim perf, Llama-3.1-8B, TP=1) is a calibration cell as a whole. It is
the only Ada profile and the only profile of vLLM's decode attention on a consumer card; as a validation cell it
would leave the GPU no fitted parameter, so the RTX 4090 vLLM run (a measured end-to-end run, validation) would
judge borrowed parameters instead of the model. The GPU's out-of-profile error is its leave-one-GPU-out figure
(:mod:`validation.protocol.crossval`), and its validation the vLLM run.

The table pricer's validation is out-of-cell only: the TP=1 table of a cell scaled to the TP>1 cells of the same
source, GPU and model by the refined roofline's ratio, and the Splitwise iterations priced from the Vidur TP=1
table of the same GPU and model (scaled the same way) with the all-reduce curves of calibration GPU counts.

The tables ``agentreplay calibrate`` ships (catalog/tables.toml) come from calibration cells only: the TP=1
profile tables and the 2- and 8-GPU all-reduce curves; a TP>1 run's table pricer scales the TP=1 table.

The constants' provenance is listed by :mod:`validation.protocol.constants`; cross-validation,
leave-one-GPU-out and leave-one-model-out live in :mod:`validation.protocol.crossval`;
:func:`validation.protocol.render.render_protocol_markdown` renders all of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

from agentreplay.perf import GpuSpec

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
    raise ValueError(f"component cell {cell_id!r}: source {src!r} has no declared role (validation/protocol/rules.py)")


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
