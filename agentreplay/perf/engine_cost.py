"""The engine cost beyond the kernels as fitted end to end on measured vLLM runs, for a simulation to price with.

``calibrate --engine-cost`` (validation/e2e/inference_perf_fit.py) fits, on measured serving runs, the terms no
kernel profile shows and writes them into the catalog's ``engine_cost.json`` (``fitted``: the in-sample fit on
every run; ``configurations``: the ``gpu/model/tpN`` deployments it was fitted on). This module maps those terms onto
a GPU's :class:`~agentreplay.perf.catalog.Efficiency` (:func:`apply_terms`, the one mapping the validation's replays
and a simulation share) and refuses a GPU the fit never saw (:func:`fitted_efficiency`): a per-step host cost
measured on an H100 says nothing about another GPU.

Terms (a missing or null one keeps the GPU catalogue's value): ``fixed_ms`` and ``per_seq_us`` (per engine step,
and per scheduled sequence; :class:`agentreplay.perf.stepcost.StepCost`), ``kernel_gap_us`` (per kernel of a
replayed CUDA graph), ``sampler_bytes_per_logit``, ``custom_allreduce_us`` and ``attn_decode_efficiency`` (null =
tied to the GPU's ``bandwidth_efficiency``). The fit ran with vLLM's deployment kernels (CUDA-graph padding,
custom all-reduce), so a simulation applies it only with ``[hardware] deployment_kernels = true``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from agentreplay.perf.catalog import Efficiency, GpuSpec
from agentreplay.perf.loaders import catalog_file

#: The catalog file the end-to-end engine-cost fit writes.
ENGINE_COST: Final = "engine_cost.json"


#: Engine-cost term -> the :class:`~agentreplay.perf.catalog.Efficiency` field it sets.
TERM_FIELDS: Final = {
    "fixed_ms": "framework_overhead_ms",
    "per_seq_us": "per_seq_overhead_us",
    "kernel_gap_us": "kernel_overhead_us",
    "attn_decode_efficiency": "attn_decode_efficiency",
    "custom_allreduce_us": "custom_allreduce_latency_us",
    "sampler_bytes_per_logit": "sampler_bytes_per_logit",
}
#: A term whose None ties it to another field of the GPU's efficiencies, not to its own field's value.
_TIED: Final = {"attn_decode_efficiency": "bandwidth_efficiency"}


def apply_terms(eff: Efficiency, terms: Mapping[str, float | None]) -> Efficiency:
    """``eff`` with the engine-cost ``terms`` in place (a missing or None term keeps ``eff``'s value; a None
    ``attn_decode_efficiency`` is the GPU's ``bandwidth_efficiency``)."""
    values = {}
    for term, field in TERM_FIELDS.items():
        v = terms.get(term)
        values[field] = float(getattr(eff, _TIED.get(term, field))) if v is None else float(v)
    return dataclasses.replace(eff, **values)


def read(catalog: str | Path | None = None) -> tuple[dict[str, Any], Path]:
    """(``engine_cost.json``'s content, its path) from ``catalog`` (default: the packaged catalog). ValueError,
    naming the file, when there is none or it holds no ``fitted`` terms."""
    path = catalog_file(catalog, ENGINE_COST)
    if not path.exists():
        raise ValueError(f"{path}: no fitted engine cost; run `agentreplay calibrate --engine-cost` first")
    data = json.loads(path.read_text())
    if not isinstance(data.get("fitted"), dict) or not data.get("configurations"):
        raise ValueError(f"{path}: field 'fitted' or 'configurations' missing; rewrite it with calibrate --engine-cost")
    return data, path


def fitted_efficiency(spec: GpuSpec, catalog: str | Path | None = None) -> Efficiency:
    """``spec``'s efficiencies with the engine cost fitted end to end in place; ValueError, naming the file and
    the GPUs it was fitted on, for a GPU the fit never saw."""
    data, path = read(catalog)
    gpus = sorted({str(c).split("/")[0] for c in data["configurations"]})
    if spec.name not in gpus:
        raise ValueError(
            f"engine_cost = 'fitted': {path} was fitted on {', '.join(gpus)}, not on {spec.name!r}; use "
            "engine_cost = 'catalog' (the GPU catalogue's values) for this GPU"
        )
    return apply_terms(spec.efficiency, data["fitted"])
