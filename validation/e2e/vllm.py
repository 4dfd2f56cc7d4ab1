"""The ``vllm-run`` end-to-end cell: a real vLLM serving run with per-request timestamps, replayed at its
measured arrivals with the deployment it ran (:mod:`validation.e2e.deployment`: the engine's own KV block count or,
when the run does not record it, the memory model's; block size, prefix caching, batching limits, dtype, KV-cache
dtype, TP, DP / EP), see :mod:`validation.e2e.cells`. A deployment the simulator does not model raises
:class:`~validation.e2e.deployment.NotSimulated`.

:func:`vllm_run_regimes` replays a run in both regimes of DESIGN §5 "Profiled deployments": priced from the
deployment profile of exactly its GPU, model, dtype and TP where one is shipped (``profiled``), and as if its GPU had
no profile (``roofline (unprofiled)``)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Final

import pandas as pd

from agentreplay.perf.deploy import kv_cache_dtype
from agentreplay.perf.registry import AUTO
from agentreplay.sim.run import simulate
from validation.catalog import PACKAGED, Catalog
from validation.e2e.common import _metrics, _perf, _rows, dist, single_turn_trace, turn_metrics
from validation.e2e.deployment import Deployment, from_config
from validation.e2e.deployment_sim import sim_config

#: ``pricer`` label of the run priced from its deployment profile (``--perf auto`` picking the table).
PROFILED: Final = "profiled"
#: ``pricer`` label of the run priced by the roofline with what the catalogue would hold for its GPU without the
#: GPU's profile (:func:`validation.protocol.crossval.logo_efficiency`: the donor GPU's kernel-level parameters).
UNPROFILED: Final = "roofline (unprofiled)"


def _deployment(cell: pd.Series) -> tuple[Any, str, Deployment]:
    """``(simulator config, what was derived, deployment)`` of a ``vllm-run`` cell, replayed at its arrivals."""
    cfg_json = json.loads(cell["config_json"])
    version = cell.get("engine_version")
    dep = from_config(
        cfg_json, str(cfg_json.get("meta_file") or cell["path"]), version if isinstance(version, str) else None
    )
    cfg, derived = sim_config(dep, cell["gpu"], cell["model"])
    return cfg.replace(workload={"arrival": "trace"}), derived, dep


def vllm_run(
    cell: pd.Series, tables: dict[str, pd.DataFrame], catalog: Catalog, pricer: str = "roofline"
) -> tuple[list[dict], dict[str, Any]]:
    req = tables["requests"]
    req = req[req["cell_id"] == cell["cell_id"]].reset_index(drop=True)
    cfg, derived, dep = _deployment(cell)
    trace = single_turn_trace(
        req["request_id"].astype(str).tolist(),
        req["arrival_s"].to_numpy(),
        req["input_tokens"].to_numpy(),
        req["output_tokens"].to_numpy(),
        cell["model"],
    )
    hw = cfg.hardware
    res = simulate(
        trace,
        cfg,
        perf=_perf(
            hw.gpu,
            hw.model,
            hw.dtype,
            hw.tp,
            catalog,
            pricer,
            kv_cache_dtype(hw.kv_cache_dtype),
            async_scheduling=dep.async_scheduling,
        ),
    )
    sim, per_sim = turn_metrics(res)
    multi = req["output_tokens"] > 1
    per_meas = {
        "ttft_s": (req["first_token_s"] - req["arrival_s"]).to_numpy(),
        "tpot_s": ((req["last_token_s"] - req["first_token_s"]) / (req["output_tokens"] - 1))[multi].to_numpy(),
        "e2e_s": (req["last_token_s"] - req["arrival_s"]).to_numpy(),
    }
    meas = {**_metrics(tables, cell["cell_id"])}
    for k, v in per_meas.items():  # p99 etc. recomputed the same way as the simulated ones
        meas.update({m: x for m, x in dist(k[:-2], v).items() if m not in meas})
    blocks = f"KV blocks {dep.num_gpu_blocks} and " if dep.num_gpu_blocks is not None else ""
    limits_from = " from the run" if not {"max_num_seqs", "max_num_batched_tokens"} & set(dep.derived) else ""
    note = (
        f"{len(req)} requests replayed at measured arrivals; {blocks}batching limits {dep.max_num_seqs} "
        f"seqs / {dep.max_num_batched_tokens} tokens{limits_from}" + (f"; {derived}" if derived else "")
    )
    return _rows(cell, meas, sim, note), {
        "measured": per_meas,
        "simulated": per_sim,
        "summary": res.summary,
        "derived": dict(dep.derived),
        "kv_blocks": cfg.cache.num_gpu_blocks,
    }


class _Tables:
    """The measured tables of a replay as :func:`validation.calibration.calibrate.component_data` reads them."""

    def __init__(self, tables: dict[str, pd.DataFrame]) -> None:
        self._tables = tables

    def table(self, name: str) -> pd.DataFrame:
        return self._tables[name]


def _labelled(rows: list[dict], pricer: str, note: str) -> list[dict]:
    return [{**r, "pricer": pricer, "note": f"{r['note']}; {note}"} for r in rows]


def vllm_run_regimes(
    cell: pd.Series, tables: dict[str, pd.DataFrame], catalog: Catalog = PACKAGED, data: Any = None
) -> pd.DataFrame:
    """The run in both regimes (DESIGN §5): ``profiled`` (:data:`PROFILED`: ``--perf auto``, the measured-table
    pricer from the shipped deployment profile of exactly the run's GPU, model, dtype, KV dtype and TP,
    :func:`agentreplay.perf.registry.choose_pricer`) and ``roofline (unprofiled)`` (:data:`UNPROFILED`: the
    roofline with the GPU's parameters as they would be without its profile, the donor GPU's). Rows as
    :func:`vllm_run`'s plus ``pricer`` and ``rel_error``; a regime that cannot be replayed (no deployment profile,
    no donor GPU) gets one row with its ``note`` and no metric. ``data``: the component points
    (:func:`validation.calibration.calibrate.component_data`; default: from ``tables``)."""
    from validation.calibration import calibrate as K
    from validation.protocol import crossval as X

    hw = _deployment(cell)[0].hardware
    choice = catalog.choose_pricer(hw.gpu, hw.model, hw.dtype, hw.tp, kv_dtype=kv_cache_dtype(hw.kv_cache_dtype))
    base = {"cell_id": cell["cell_id"], "gpu": cell["gpu"], "model": cell["model"]}
    out: list[dict] = []
    if choice.kind == "table":
        out += _labelled(vllm_run(cell, tables, catalog, AUTO)[0], PROFILED, f"priced from {choice.source}")
    else:
        out.append({**base, "pricer": PROFILED, "note": choice.reason})
    data = data if data is not None else K.component_data(_Tables(tables))  # type: ignore[arg-type]
    logo = X.logo_efficiencies(data, catalog).get(str(cell["gpu"]))
    if logo is None:
        out.append({**base, "pricer": UNPROFILED, "note": f"{cell['gpu']} has no own profile fit or no donor GPU"})
    else:
        with tempfile.TemporaryDirectory(prefix="agentreplay-unprofiled-") as tmp:
            unprofiled = K.with_efficiency(catalog, str(cell["gpu"]), logo[1], Path(tmp))
            rows = vllm_run(cell, tables, unprofiled, "roofline")[0]
        out += _labelled(rows, UNPROFILED, f"{cell['gpu']} priced with {logo[0]}'s kernel-level parameters")
    df = pd.DataFrame(out)
    if "measured" in df:
        df["rel_error"] = df["simulated"] / df["measured"] - 1
    return df
