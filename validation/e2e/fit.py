"""End-to-end calibration of the engine-level parameters on a user's own measured runs, with a declared split.

``agentreplay calibrate --measured RUN... --calibration CELL_GLOB...``: every end-to-end ``vllm-run`` cell of the
given sources whose id matches a ``--calibration`` glob is a *calibration* cell; every other one is *held out*.
The parameters of the per-step engine cost (:class:`agentreplay.perf.stepcost.StepCost`: ``framework_overhead_ms``
and ``per_seq_overhead_us``, host work no kernel profile shows) are fitted on the calibration cells only; the
held-out cells are then replayed with the fitted values and their error is printed. Nothing is chosen by
looking at a held-out cell: the split is declared before the fit, and the fit reads only calibration cells
(:func:`validation.e2e.fit_measured.fit_measured` collects the given sources and declares the split).

Each cell is replayed as it ran (:func:`runs_from_tables`): its requests at their measured arrivals, its KV block
count, block size, prefix caching, batching limits, dtype, TP and (``engine_kwargs``) DP / EP. The fit minimises
the mean squared log ratio simulated / measured over :data:`FIT_METRICS` of every calibration cell (so a 10% miss
weighs the same on every metric and cell), with bounded Nelder-Mead (``scipy.optimize.minimize``) from the catalogue
values. One step cost is fitted for all calibration cells together: it is host-side work (scheduler, input
preparation, output processing), so the same value is used on every GPU, and a held-out cell on another GPU
measures how well that transfers.

Whole-model iteration cells (the Splitwise format: prefill / decode iteration times per batch, ``component``
rows ``prefill_iteration`` / ``decode_iteration``) can be the calibration cells instead
(:func:`fit_iterations`): there the step cost is linear in the two parameters and the fit is exact non-negative
least squares on relative errors; held-out serving runs are then replayed with the fitted values.

:func:`write_vllm_run` writes a simulated run in the ``vllm-run`` format (``requests.jsonl`` + ``meta.json``):
the tests make synthetic "measured" runs with known parameters and check that the fit recovers them.
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.perf import PerfModel, load_gpu, load_model
from agentreplay.perf.catalog import Efficiency
from agentreplay.perf.stepcost import StepCost
from agentreplay.sim.config import SimConfig
from agentreplay.sim.result import SimResult
from agentreplay.sim.run import simulate
from agentreplay.trace.io import Trace
from validation.e2e.common import single_turn_trace

#: Metrics the fit matches (per-request latency figures every vllm-run cell records).
FIT_METRICS: Final = ("ttft_mean_s", "ttft_p50_s", "tpot_mean_s", "tpot_p50_s", "e2e_mean_s", "e2e_p50_s")
#: Bounds of the fitted parameters: per step 0-50 ms, per sequence 0-2 ms.
BOUNDS: Final = ((0.0, 50.0), (0.0, 2000.0))
_SOURCE = "vllm-run"


class FitError(ValueError):
    """A declared split that cannot be fitted, or a cell that cannot be replayed; names the cell and field."""


@dataclass(frozen=True)
class MeasuredRun:
    """One end-to-end cell ready to replay: its requests as a trace, its deployment, its measured metrics."""

    cell_id: str
    trace: Trace
    cfg: SimConfig
    measured: dict[str, float]


@dataclass
class FitResult:
    calibration: list[str]
    held_out: list[str]
    start: StepCost  #: where the fit started (the first calibration cell's GPU's catalogue values)
    fitted: StepCost
    evaluations: int
    #: per cell and metric: measured, simulated with the cell GPU's catalogue step cost ("start"), and with the
    #: fitted one
    rows: list[dict[str, Any]] = field(default_factory=list)

    def mape_pct(self, role: str, which: str = "fitted") -> float:
        """Mean absolute % error over the cells of ``role`` ("calibration" / "held-out") and FIT_METRICS."""
        errs = [abs(r[which] / r["measured"] - 1) for r in self.rows if r["role"] == role]
        return 100 * float(np.mean(errs)) if errs else math.nan

    def as_dict(self) -> dict[str, Any]:
        """The fit as ``calibrate --calibration --out`` writes it: the split, the start and fitted step cost, the
        MAPE per role before / after and every row."""
        return {
            "calibration": self.calibration,
            "held_out": self.held_out,
            "start": self.start.as_dict(),
            "fitted": self.fitted.as_dict(),
            "mape_pct": {
                r: {"start": self.mape_pct(r, "start"), "fitted": self.mape_pct(r)} for r in ("calibration", "held-out")
            },
            "rows": self.rows,
        }


# ---- reading cells ------------------------------------------------------------------------------------------------
def _int(cfg: dict[str, Any], key: str, cell_id: str) -> int:
    v = cfg.get(key)
    if v is None:
        raise FitError(f"{cell_id}: config field {key!r} is missing (the run must record it to be replayed)")
    return int(v)


def runs_from_tables(tables: dict[str, pd.DataFrame]) -> list[MeasuredRun]:
    """Every ``vllm-run`` cell of the measured tables, as a :class:`MeasuredRun`."""
    cells = tables.get("cells")
    if cells is None or cells.empty:
        return []
    ours = cells[cells["source"] == _SOURCE]
    if ours.empty:
        return []
    req_all, met_all = tables["requests"], tables["metrics"]
    out = []
    for _, c in ours.iterrows():
        cid = str(c["cell_id"])
        cfg_json = json.loads(c["config_json"])
        ek = cfg_json.get("engine_kwargs") or {}
        if not isinstance(c["gpu"], str):
            raise FitError(f"{cid}: GPU {c['gpu_raw']!r} is not in the catalogue")
        dtype = str(c["dtype"])
        if dtype == "auto":
            dtype = "bf16"
        dp = int(ek.get("data_parallel_size") or 1)
        ep = bool(ek.get("enable_expert_parallel") or False)
        hw: dict[str, Any] = {
            "gpu": c["gpu"],
            "model": c["model"],
            "dtype": dtype,
            "tp": int(c["tp"]),
            "dp": dp,
            "ep": ep,
        }
        if ek.get("all2all_backend"):
            hw["all2all_backend"] = ek["all2all_backend"]
        cfg = SimConfig().replace(
            hardware=hw,
            cache={
                "num_gpu_blocks": _int(cfg_json, "num_gpu_blocks", cid),
                "block_size": _int(cfg_json, "block_size", cid),
                "enable_prefix_caching": bool(cfg_json.get("enable_prefix_caching", True)),
            },
            scheduler={
                "max_num_seqs": _int(cfg_json, "max_num_seqs", cid),
                "max_num_batched_tokens": _int(cfg_json, "max_num_batched_tokens", cid),
            },
            router={"policy": "vllm-dp" if dp > 1 else "least-loaded"},
            workload={"arrival": "trace"},
        )
        req = req_all[req_all["cell_id"] == cid]
        trace = single_turn_trace(
            req["request_id"].astype(str).tolist(),
            req["arrival_s"].to_numpy(),
            req["input_tokens"].to_numpy(),
            req["output_tokens"].to_numpy(),
            str(c["model"]),
        )
        met = met_all[met_all["cell_id"] == cid]
        measured = {str(k): float(v) for k, v in zip(met["metric"], met["value"], strict=True) if k in FIT_METRICS}
        out.append(MeasuredRun(cid, trace, cfg, measured))
    return out


def split(runs: Sequence[Any], calibration_globs: Sequence[str], require: bool = True) -> tuple[list[Any], list[Any]]:
    """(calibration, held-out) of cells (anything with a ``cell_id``): a cell is calibration when its id matches
    any glob, held out otherwise. ``require``: FitError when no cell matches."""
    if not calibration_globs:
        raise FitError("no --calibration glob: declare which cells fit (the rest are held out)")
    cal = [r for r in runs if any(fnmatch.fnmatchcase(r.cell_id, g) for g in calibration_globs)]
    if not cal and require:
        ids = ", ".join(r.cell_id for r in runs) or "none"
        raise FitError(f"no end-to-end cell matches --calibration {list(calibration_globs)}; cells: {ids}")
    return cal, [r for r in runs if r not in cal]


# ---- replay -----------------------------------------------------------------------------------------------------
def metrics(res: SimResult) -> dict[str, float]:
    """FIT_METRICS of a simulated single-turn replay (same definitions as the vllm-run collector)."""
    t = res.turns
    e2e = (t["finish_s"] - t["release_s"]).to_numpy()
    multi = t["output_tokens"] > 1
    tpot = ((t["finish_s"] - t["first_token_s"])[multi] / (t["output_tokens"][multi] - 1)).to_numpy()
    out = {}
    for name, v in (("ttft", t["ttft_s"].to_numpy()), ("tpot", tpot), ("e2e", e2e)):
        if len(v):
            out[f"{name}_mean_s"] = float(np.mean(v))
            out[f"{name}_p50_s"] = float(np.percentile(v, 50))
    return out


def replay(run: MeasuredRun, cost: StepCost | None = None, base: Efficiency | None = None) -> SimResult:
    """Simulate ``run`` with the roofline of its GPU, its step cost replaced by ``cost`` (if given)."""
    hw = run.cfg.hardware
    gpu = load_gpu(hw.gpu)
    eff = base if base is not None else gpu.efficiency
    if cost is not None:
        eff = cost.apply(eff)
    perf = PerfModel(gpu, load_model(hw.model), hw.dtype, hw.tp, efficiency=eff, mixed_attention=hw.mixed_attention)
    return simulate(run.trace, run.cfg, perf=perf)


def _loss(runs: Sequence[MeasuredRun], cost: StepCost) -> float:
    errs = []
    for run in runs:
        sim = metrics(replay(run, cost))
        errs += [
            math.log(sim[m] / run.measured[m]) ** 2
            for m in FIT_METRICS
            if m in run.measured and run.measured[m] > 0 and sim.get(m, 0) > 0
        ]
    if not errs:
        raise FitError("the calibration cells have none of the metrics " + ", ".join(FIT_METRICS))
    return float(np.mean(errs))


def fit(
    calibration: Sequence[MeasuredRun],
    held_out: Sequence[MeasuredRun] = (),
    start: StepCost | None = None,
    xatol: float = 1e-3,
    held_out_iterations: Sequence[IterationCell] = (),
) -> FitResult:
    """Fit the step cost on ``calibration`` (module docstring), then replay every cell with the start and the
    fitted values. ``start``: the catalogue value of the first calibration cell's GPU unless given."""
    from scipy.optimize import minimize

    if not calibration:
        raise FitError("no calibration cell")
    if start is None:
        start = StepCost.of(load_gpu(calibration[0].cfg.hardware.gpu).efficiency)
    evals = 0

    def loss(x: np.ndarray) -> float:
        nonlocal evals
        evals += 1
        return _loss(calibration, StepCost(max(0.0, float(x[0])), max(0.0, float(x[1]) * 100.0)))

    # per_seq_us is searched in units of 100 us so that both coordinates move on the scale of a millisecond
    x0 = np.array([max(start.fixed_ms, 0.1), max(start.per_seq_us, 10.0) / 100.0])
    simplex = np.array([x0, x0 + np.array([2.0, 0.0]), x0 + np.array([0.0, 0.5])])
    got = minimize(
        loss,
        x0,
        method="Nelder-Mead",
        bounds=[BOUNDS[0], (BOUNDS[1][0] / 100.0, BOUNDS[1][1] / 100.0)],
        options={"initial_simplex": simplex, "xatol": xatol, "fatol": 1e-12, "maxfev": 200},
    )
    fitted = StepCost(max(0.0, float(got.x[0])), max(0.0, float(got.x[1]) * 100.0))
    result = FitResult([r.cell_id for r in calibration], [r.cell_id for r in held_out], start, fitted, evals)
    evaluate_runs(result, calibration, "calibration")
    evaluate_runs(result, held_out, "held-out")
    evaluate_iterations(result, held_out_iterations, "held-out")
    return result


def evaluate_runs(result: FitResult, runs: Sequence[MeasuredRun], role: str) -> None:
    """Replay ``runs`` with their GPU's catalogue step cost and with the fitted one; add their rows to
    ``result``."""
    for run in runs:
        before, after = metrics(replay(run)), metrics(replay(run, result.fitted))
        for m in FIT_METRICS:
            if m in run.measured and run.measured[m] > 0 and m in after:
                result.rows.append(
                    {
                        "cell_id": run.cell_id,
                        "role": role,
                        "metric": m,
                        "measured": run.measured[m],
                        "start": before[m],
                        "fitted": after[m],
                    }
                )


# ---- whole-model iteration cells (Splitwise format) ---------------------------------------------------------------
@dataclass(frozen=True)
class IterationCell:
    """Measured whole-model prefill / decode iterations of one (GPU, model, TP): one row per operating point
    (:func:`validation.components.profiles.iteration_points`: group, num_tokens, batch_size, context_tokens,
    measured_s)."""

    cell_id: str
    gpu: str
    model: str
    tp: int
    points: pd.DataFrame


def iteration_cells_from_tables(tables: dict[str, pd.DataFrame]) -> tuple[list[IterationCell], list[str]]:
    """(cells with whole-model iterations of a catalogue GPU and model, reasons the others are not used)."""
    from validation.components.profiles import iteration_points

    cells, comp = tables.get("cells"), tables.get("component")
    if cells is None or comp is None or cells.empty or comp.empty:
        return [], []
    has = set(comp.loc[comp["op"].isin(["prefill_iteration", "decode_iteration"]), "cell_id"])
    out, skipped = [], []
    for _, c in cells[cells["cell_id"].isin(has)].iterrows():
        cid = str(c["cell_id"])
        if not isinstance(c["gpu"], str):
            skipped.append(f"{cid}: GPU {c.get('gpu_raw')!r} is not in the catalogue")
            continue
        try:
            load_gpu(str(c["gpu"]))
            load_model(str(c["model"]))
        except (ValueError, KeyError) as exc:
            skipped.append(f"{cid}: {exc}")
            continue
        out.append(IterationCell(cid, str(c["gpu"]), str(c["model"]), int(c["tp"]), iteration_points(comp, [cid])))
    return out, skipped


def _iteration_times(cell: IterationCell, cost: StepCost) -> np.ndarray:
    from validation.components.predict import predict_iterations

    gpu = load_gpu(cell.gpu)
    return predict_iterations(
        cell.points, gpu, {cell.cell_id: load_model(cell.model)}, {cell.cell_id: cell.tp}, cost.apply(gpu.efficiency)
    )


def fit_iterations(
    calibration: Sequence[IterationCell],
    held_out: Sequence[IterationCell] = (),
    held_out_runs: Sequence[MeasuredRun] = (),
    start: StepCost | None = None,
) -> FitResult:
    """Fit the step cost on whole-model iterations: an iteration of ``b`` sequences is the roofline without step
    cost plus ``fixed_ms * 1e-3 + per_seq_us * 1e-6 * b``, linear in the two parameters, so the fit is exact
    non-negative least squares on relative errors (``scipy.optimize.nnls``). Held-out iteration cells and serving
    runs are then priced / replayed with the catalogue and the fitted values."""
    from scipy.optimize import nnls

    if not calibration:
        raise FitError("no calibration cell")
    if start is None:
        start = StepCost.of(load_gpu(calibration[0].gpu).efficiency)
    rows, rhs = [], []
    for cell in calibration:
        m = cell.points["measured_s"].to_numpy()
        p0 = _iteration_times(cell, StepCost(0.0, 0.0))
        seqs = cell.points["batch_size"].to_numpy(dtype=float)
        rows.append(np.column_stack([1e-3 / m, 1e-6 * seqs / m]))
        rhs.append(1.0 - p0 / m)
    x, _ = nnls(np.vstack(rows), np.concatenate(rhs))
    fitted = StepCost(float(x[0]), float(x[1]))
    held_ids = [c.cell_id for c in held_out] + [r.cell_id for r in held_out_runs]
    result = FitResult([c.cell_id for c in calibration], held_ids, start, fitted, 1)
    evaluate_iterations(result, calibration, "calibration")
    evaluate_iterations(result, held_out, "held-out")
    evaluate_runs(result, held_out_runs, "held-out")
    return result


def evaluate_iterations(result: FitResult, cells: Sequence[IterationCell], role: str) -> None:
    """Price ``cells``' iterations with their GPU's catalogue step cost and with the fitted one; add the rows."""
    for cell in cells:
        before = _iteration_times(cell, StepCost.of(load_gpu(cell.gpu).efficiency))
        after = _iteration_times(cell, result.fitted)
        for r, b, a in zip(cell.points.itertuples(index=False), before, after, strict=True):
            result.rows.append(
                {
                    "cell_id": cell.cell_id,
                    "role": role,
                    "metric": f"{r.group} b={r.batch_size} n={r.num_tokens} ctx={r.context_tokens}",
                    "measured": float(r.measured_s),
                    "start": float(b),
                    "fitted": float(a),
                }
            )


# ---- synthetic runs in the vllm-run format ----------------------------------------------------------------------
def write_vllm_run(
    out_dir: str | Path,
    res: SimResult,
    device_name: str,
    hf_model: str,
    dataset_path: str | None = None,
    epoch_s: float = 1.7e9,
) -> Path:
    """Write a simulated single-turn run as a ``vllm-run`` folder (``requests.jsonl`` + ``meta.json``), with the
    deployment its config ran: what a real vLLM run measured with the same engine would record."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg, t = res.config, res.turns
    with open(out / "requests.jsonl", "w", encoding="utf-8") as f:
        for row in t.itertuples(index=False):
            a = epoch_s + float(row.release_s)
            f.write(
                json.dumps(
                    {
                        "request_id": str(row.program_id),
                        "input_toks": int(row.input_tokens),
                        "output_toks": int(row.output_tokens),
                        "arrival_time": a,
                        "queued_ts": a,
                        "scheduled_ts": epoch_s + float(row.first_scheduled_s),
                        "first_token_ts": epoch_s + float(row.first_token_s),
                        "last_token_ts": epoch_s + float(row.finish_s),
                    }
                )
                + "\n"
            )
    c = res.summary["cluster"]
    hw = cfg.hardware
    meta = {
        "model": hf_model,
        "vllm_version": "simulated",
        "engine_kwargs": {
            "tensor_parallel_size": hw.tp,
            "data_parallel_size": hw.dp,
            "enable_expert_parallel": hw.ep,
            "all2all_backend": hw.all2all_backend,
            "dtype": {"bf16": "bfloat16"}.get(hw.dtype, hw.dtype),
            "max_num_seqs": c["max_num_seqs"],
            "max_num_batched_tokens": c["max_num_batched_tokens"],
        },
        "kv_cache": {
            "num_gpu_blocks": c["num_gpu_blocks"],
            "block_size": cfg.cache.block_size,
            "gpu_memory_utilization": cfg.cache.gpu_memory_utilization,
            "enable_prefix_caching": cfg.cache.enable_prefix_caching,
        },
        "hardware": {"device_name": device_name},
        "dataset_path": dataset_path,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out
