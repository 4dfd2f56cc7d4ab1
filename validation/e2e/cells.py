"""End-to-end validation cells: replay each measured serving or agent run in the simulator and compare.

- ``vllm-run`` (per-request timestamps): every request becomes a one-turn program arriving at its measured
  arrival time (``arrival = "trace"``), on the deployment the run records (:mod:`validation.e2e.deployment`: every
  field of ``meta.json``, vLLM's documented default where one is absent and said so; a field the simulator does
  not model, e.g. data or expert parallelism, makes the cell "not simulated" with the file, field and value).
  Compared: TTFT, TPOT, E2E (mean, p50, p90, p99), output throughput; per-request values are kept for CDF
  overlays (:mod:`validation.e2e.vllm`).
- ``llmperf`` (aggregates only): the client replayed as it ran (:mod:`validation.e2e.llmperf_client`): 64 threads,
  each re-sending its own seeded prompt until 64 completions are recorded, the unrecorded launch spread estimated
  from the measured span and E2E distribution; token counts converted from the Llama-2 tokenizer's. Compared:
  TTFT, ITL as LLMPerf defines it, E2E and throughput; the throughputs are fixed by construction (the spread is
  fitted to the measured span) and reported as such, not judged. What the runs do not record (memory utilisation,
  batching limits, prefix-cache state, TP) is swept by :func:`validation.e2e.llmperf.llmperf_sensitivity`.
- ``agent-jct``: the measured run's trajectories are not public; the bundled ``datasets/swebench-verified``
  (mini-swe-agent + Gemini 3 Pro) stands in, closed loop with 64 in flight, the ``vllm`` preset.
- ``mlperf``: not simulated (see :data:`SKIPPED_SOURCES`).

Every row is role ``validation``: no end-to-end cell feeds the calibration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import simulate
from agentreplay.trace.io import read_trace
from validation.catalog import PACKAGED, Catalog
from validation.e2e.common import E2E_PRICERS, _metrics, _perf, _rows
from validation.e2e.llmperf import llmperf
from validation.e2e.vllm import vllm_run

SKIPPED_SOURCES: Final = {
    "mlperf": "not simulated: the OpenOrca input-length distribution is not in the measured summaries (only "
    "outputs per sample = tokens/s / samples/s), TP and batching of the TensorRT-LLM engine are not "
    "recorded, and the simulator models vLLM scheduling; any replay would rest on typed-in assumptions",
}
#: sources whose cells are replayed per run, with fitted engine costs, by their own module (not per cell here)
REPLAYED_ELSEWHERE: Final = {"inference-perf": "validation.e2e.peers"}
AGENT_CAVEAT: Final = (
    "stand-in trajectories: mini-swe-agent + Gemini 3 Pro (datasets/swebench-verified), whose "
    "turns are far longer than the measured run's Llama-3.1-70B agent turns; the measured run's "
    "own trajectories are not public"
)
DATASET: Final = Path(__file__).resolve().parents[2] / "datasets" / "swebench-verified"


# ---------------------------------------------------------------------------------------------- agent JCT
def agent_jct(
    cell: pd.Series, tables: dict[str, pd.DataFrame], catalog: Catalog, dataset: Path = DATASET
) -> tuple[list[dict], dict[str, Any]]:
    meas = _metrics(tables, cell["cell_id"])
    prog = tables["programs"]
    meas_jct = prog.loc[prog["cell_id"] == cell["cell_id"], "jct_s"].to_numpy(dtype=float)
    cfg = SimConfig().replace(
        hardware={"gpu": cell["gpu"], "model": cell["model"], "dtype": cell["dtype"], "tp": int(cell["tp"])},
        workload={"arrival": "closed", "concurrency": 64},
    )
    try:
        from agentreplay.policy.presets import apply_preset

        cfg = apply_preset(cfg, "vllm")
    except ImportError:  # presets not available: the defaults are vLLM's behaviour
        pass
    res = simulate(
        read_trace(dataset), cfg, perf=_perf(cell["gpu"], cell["model"], cell["dtype"], int(cell["tp"]), catalog)
    )
    jct = res.programs["jct_s"].to_numpy(dtype=float)
    sim = {
        "jct_mean_s": float(jct.mean()),
        "jct_p50_s": float(np.median(jct)),
        "jct_p95_s": float(np.percentile(jct, 95)),
        "makespan_s": float(res.summary["makespan_s"]),
    }
    w = res.summary
    note = (
        f"{AGENT_CAVEAT}. Stand-in: {w['turns'] / w['programs']:.1f} turns and "
        f"{w['input_tokens'] / w['turns']:,.0f} input tokens per turn; simulated prefix hit rate "
        f"{w['prefix_hit_rate']:.3f}, {w['preemptions']:,} preemptions, {w['recomputed_tokens']:,} recomputed "
        "tokens"
    )
    return _rows(cell, meas, sim, note), {
        "measured": {"jct_s": meas_jct},
        "simulated": {"jct_s": jct},
        "summary": res.summary,
    }


# ---------------------------------------------------------------------------------------------- all
def not_replayable(d: dict[str, Any]) -> str:
    """Why a replayed cell's measurement cannot be reproduced by any replay ('' when it can): an LLMPerf run whose
    measured mean TTFT is below the time to prefill its mean prompt alone at the datasheet peak (the floor
    :func:`validation.e2e.llmperf.llmperf` computes) timed something other than a prefill of that prompt."""
    floor, ttft = d.get("ttft_floor_s"), d.get("measured_ttft_mean_s")
    if floor is not None and ttft is not None and ttft < floor:
        return (
            f"measured mean TTFT {ttft:.4f} s is below the prefill floor {floor:.4f} s (the mean prompt through "
            "the linear layers at the datasheet peak)"
        )
    return ""


def run_all(
    tables: dict[str, pd.DataFrame], catalog: Catalog = PACKAGED, *, agent: bool = True, dataset: Path = DATASET
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]], list[tuple[str, str]]]:
    """Simulate every end-to-end cell; returns (error rows, per-cell distributions, skipped (cell, reason))."""
    cells = tables["cells"]
    cells = cells[cells["kind"] == "end-to-end"]
    known = set(catalog.gpus())
    rows: list[dict] = []
    dists: dict[str, dict[str, Any]] = {}
    skipped: list[tuple[str, str]] = []
    handlers = {"vllm-run": vllm_run, "llmperf": llmperf, "agent-jct": agent_jct}
    for _, cell in cells.iterrows():
        src = cell["source"]
        if src in REPLAYED_ELSEWHERE:
            continue
        if src in SKIPPED_SOURCES:
            skipped.append((cell["cell_id"], SKIPPED_SOURCES[src]))
        elif src not in handlers:
            skipped.append((cell["cell_id"], f"no replay for source {src!r}"))
        elif not isinstance(cell["gpu"], str) or cell["gpu"] not in known:
            skipped.append((cell["cell_id"], f"GPU {cell['gpu_raw']!r} is not in the catalog"))
        elif src == "agent-jct" and not agent:
            skipped.append((cell["cell_id"], "skipped in --quick mode"))
        elif src == "agent-jct" and not (dataset / "turns.parquet").exists():
            skipped.append((cell["cell_id"], f"stand-in trajectories not found at {dataset}"))
        else:
            from validation.e2e.deployment import NotSimulated

            try:
                r, d = handlers[src](cell, tables, catalog)
            except NotSimulated as exc:  # a deployment field the simulator does not model: listed, never replaced
                skipped.append((cell["cell_id"], f"not simulated: {exc}"))
                continue
            dists[cell["cell_id"]] = d
            why = not_replayable(d)
            if why:  # reported apart with the reason, never averaged in
                skipped.append((cell["cell_id"], f"not replayable: {why}"))
                continue
            rows.extend(r)
    return pd.DataFrame(rows), dists, skipped


def alternatives(tables: dict[str, pd.DataFrame], catalog: Catalog = PACKAGED) -> pd.DataFrame:
    """The RTX 4090 vLLM run and the LLMPerf RTX 3090 BF16 cells replayed with the refined roofline, the table
    pricer and, where mixed attention is one kernel, both rooflines with it apart (rows as :func:`run_all`'s plus
    ``pricer``); the default-roofline rows are in :func:`run_all`."""
    cells = tables["cells"]
    sel = cells[
        (cells["source"] == "vllm-run")
        | ((cells["source"] == "llmperf") & (cells["gpu"] == "rtx3090") & (cells["dtype"] == "bf16"))
    ]
    known = set(catalog.gpus())
    rows: list[dict] = []
    for _, cell in sel.iterrows():
        if cell["gpu"] not in known:
            continue
        try:
            one_kernel = _perf(
                cell["gpu"], cell["model"], cell["dtype"], int(cell["tp"]), catalog
            ).needs_decode_contexts
        except ValueError as exc:  # a dtype or model the pricers cannot price: the cell is listed by run_all
            rows.append({"cell_id": cell["cell_id"], "pricer": "roofline", "note": str(exc)})
            continue
        for pricer in E2E_PRICERS[1:]:
            if pricer.endswith(":apart") and not one_kernel:
                continue  # no tile form on this GPU: mixed attention is priced apart already
            fn = vllm_run if cell["source"] == "vllm-run" else llmperf
            try:
                r, _ = fn(cell, tables, catalog, pricer=pricer)
            except ValueError as exc:  # no measured table for this GPU and model
                rows.append({"cell_id": cell["cell_id"], "pricer": pricer, "note": str(exc)})
                continue
            rows.extend({**x, "pricer": pricer} for x in r)
    df = pd.DataFrame(rows)
    if len(df) and "measured" in df:
        df["rel_error"] = df["simulated"] / df["measured"] - 1
    return df
