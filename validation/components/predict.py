"""The performance model's prediction of the measured component points of :mod:`validation.components.profiles`: one
operator occurrence, one whole-model iteration, one all-reduce (the formulas are in that module's docstring), and
the per-layer sums the refined roofline's fit reads."""

from __future__ import annotations

from typing import Final

import numpy as np
import pandas as pd

from agentreplay.perf import (
    Efficiency,
    GpuSpec,
    ModelSpec,
    PerfModel,
)
from agentreplay.perf.table import (
    AllReduceTable,
    MeasuredTable,
    RefinedPerfModel,
    Refinement,
    TablePerfModel,
    launch_s,
)
from validation.components.profiles import GROUPS

_AR_MODEL: Final = ModelSpec(
    name="allreduce-probe",
    hf_repo="",
    model_type="llama",
    hidden_size=64,
    num_hidden_layers=1,
    num_attention_heads=16,
    num_key_value_heads=16,
    head_dim=4,
    intermediate_size=64,
    vocab_size=64,
    max_position_embeddings=1 << 30,
    tie_word_embeddings=False,
)


def _probe(pm: PerfModel, probe: str, n: int, b: int, ctx: int) -> dict[str, float]:
    if probe == "tokens":
        return pm.breakdown([(n, 0)], ())
    if probe == "seqs":
        return pm.breakdown((), [0] * n)
    if probe == "attn_prefill":
        return pm.breakdown([(n, ctx)], ())
    if probe == "attn_decode":
        return pm.breakdown((), [ctx] * b)
    raise ValueError(f"unknown probe {probe!r}")


def roofline(
    gpu: GpuSpec,
    spec: ModelSpec,
    tp: int,
    eff: Efficiency,
    refinement: Refinement | None = None,
    dtype: str = "bf16",
    custom_allreduce: bool = False,
) -> PerfModel:
    """The plain roofline, or the refined one when ``refinement`` is given (kernels run eagerly, as profiled);
    every TP all-reduce priced as NCCL's ring unless ``custom_allreduce`` (vLLM's custom all-reduce where vLLM
    uses it)."""
    if refinement is None:
        return PerfModel(gpu, spec, dtype, tp, efficiency=eff, custom_allreduce=custom_allreduce)  # type: ignore
    return RefinedPerfModel(
        gpu,
        spec,
        dtype,
        tp,
        efficiency=eff,
        refinement=refinement,  # type: ignore[arg-type]
        custom_allreduce=custom_allreduce,
    )


def predict_with(points: pd.DataFrame, pricers: dict[str, PerfModel | TablePerfModel]) -> np.ndarray:
    """Seconds for each row of :func:`op_points` under ``pricers[cell_id]``: the pricer's operator time per
    measured occurrence plus, for an operator a roofline prices (not a table), the fixed cost of the ``launches``
    source kernels summed into the row."""
    out = np.empty(len(points))
    for cid, idx in points.groupby("cell_id", sort=False).indices.items():
        pm = pricers[cid]
        base = pm.fallback if isinstance(pm, TablePerfModel) else pm
        sub = points.iloc[idx]
        cache: dict[tuple, dict[str, float]] = {}
        for j, r in zip(idx, sub.itertuples(index=False), strict=True):
            key = (r.probe, r.num_tokens, r.batch_size, r.context_tokens)
            bd = cache.get(key)
            if bd is None:
                bd = cache[key] = _probe(pm, *key)  # type: ignore[arg-type]
            tabled = isinstance(pm, TablePerfModel) and pm.covers(r.group)
            out[j] = bd[r.group] / r.mult + (0.0 if tabled else r.launches * launch_s(base, r.group))
    return out


def predict_ops(
    points: pd.DataFrame,
    gpu: GpuSpec,
    specs: dict[str, ModelSpec],
    tps: dict[str, int],
    eff: Efficiency,
    refinement: Refinement | None = None,
) -> np.ndarray:
    """Model seconds for each row of :func:`op_points` (all rows on ``gpu``), with efficiencies ``eff`` (and the
    refined roofline when ``refinement`` is given)."""
    cids = points["cell_id"].unique()
    return predict_with(points, {c: roofline(gpu, specs[c], tps[c], eff, refinement) for c in cids})


def predict_iterations(
    points: pd.DataFrame,
    gpu: GpuSpec,
    specs: dict[str, ModelSpec],
    tps: dict[str, int],
    eff: Efficiency,
    refinement: Refinement | None = None,
    pricers: dict[str, PerfModel | TablePerfModel] | None = None,
) -> np.ndarray:
    """Model seconds of whole-model prefill / decode iterations (Splitwise rows); ``pricers`` (per cell_id)
    override the roofline."""
    out = np.empty(len(points))
    for cid, idx in points.groupby("cell_id", sort=False).indices.items():
        pm = (pricers or {}).get(cid) or roofline(gpu, specs[cid], tps[cid], eff, refinement)
        for j, r in zip(idx, points.iloc[idx].itertuples(index=False), strict=True):
            b = int(r.batch_size)
            if r.group == "prefill_iteration":
                out[j] = pm.iteration_time_s([(int(r.num_tokens) // b, 0)] * b, ())
            else:
                out[j] = pm.iteration_time_s((), [int(r.context_tokens)] * b)
    return out


def predict_allreduce(
    points: pd.DataFrame,
    gpu: GpuSpec,
    eff: Efficiency,
    refinement: Refinement | None = None,
    tables: dict[int, AllReduceTable] | None = None,
) -> np.ndarray:
    """Model seconds of one all-reduce of ``bytes`` over ``tp`` GPUs: the model's ``tp_comm`` of a one-layer
    model (3 all-reduces) for ``bytes / (2 * hidden)`` tokens, divided by 3; ``tables`` (by GPU count): price
    through :class:`TablePerfModel` with that measured all-reduce table (the roofline as its fallback). The
    curves are NCCL benchmarks, so the model prices NCCL's ring at every size, never vLLM's custom all-reduce."""
    out = np.empty(len(points))
    for tp, idx in points.groupby("tp", sort=False).indices.items():
        pm: PerfModel | TablePerfModel = roofline(gpu, _AR_MODEL, int(tp), eff, refinement, custom_allreduce=False)
        t = (tables or {}).get(int(tp))
        if t is not None:
            pm = TablePerfModel(
                MeasuredTable(name=t.name, gpu=gpu.name, model=_AR_MODEL.name, tp=int(tp)), pm, all_reduce=t
            )  # type: ignore[arg-type]
        for j, nbytes in zip(idx, points["bytes"].to_numpy()[idx], strict=True):
            tokens = max(1, round(int(nbytes) / (2 * _AR_MODEL.hidden_size)))
            out[j] = pm.breakdown([(tokens, 0, False)], ())["tp_comm"] / 3
    return out


def layer_sums(points: pd.DataFrame, predicted: np.ndarray, source: dict[str, str]) -> pd.DataFrame:
    """Per (cell, num_tokens): measured and predicted time of one decoder layer = sum over the per-layer token
    groups of ``mult x`` time (only points where every per-layer group of the source was measured)."""
    d = points.assign(predicted_s=predicted)
    d = d[d["per_layer"] & (d["probe"] == "tokens")]
    rows = []
    for (cid, n), g in d.groupby(["cell_id", "num_tokens"], sort=False):
        expected = {x.group for x in GROUPS[source[cid]] if x.per_layer}
        present = set(g["group"])
        if not expected <= present and not (expected - {"attention_prefill"}) <= present:
            continue
        rows.append(
            (
                cid,
                int(n),
                float((g["measured_s"] * g["mult"]).sum()),
                float((g["predicted_s"] * g["mult"]).sum()),
                "+".join(sorted(present)),
            )
        )
    return pd.DataFrame(rows, columns=["cell_id", "num_tokens", "measured_s", "predicted_s", "ops"])
