"""What every end-to-end replay shares: the one-turn-per-request trace, the pricer by name, the metric
dictionaries and the error rows (used by :mod:`validation.e2e.vllm`, :mod:`validation.e2e.llmperf` and
:mod:`validation.e2e.cells`)."""

from __future__ import annotations

from typing import Final

import numpy as np
import pandas as pd

from agentreplay.perf import PerfModel
from agentreplay.perf.table import TablePerfModel
from agentreplay.sim.result import SimResult
from agentreplay.trace.io import Trace
from validation.catalog import Catalog

QUANTILES: Final = (50, 90, 99)


def single_turn_trace(
    ids: list[str],
    arrival_s: np.ndarray | None,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    model: str,
    *,
    shared_prefix_ids: list[str] | None = None,
    source: str = "validation",
) -> Trace:
    """One program per request, one turn each, no tool call. ``shared_prefix_ids``: each request's whole prompt is
    that shared-prefix segment (requests naming the same id send the same prompt); None: no shared prefix."""
    n = len(ids)
    progs = pd.DataFrame(
        {
            "program_id": ids,
            "source": source,
            "task_id": ids,
            "agent": "none",
            "model": model,
            "n_turns": np.ones(n, dtype=np.int32),
            "resolved": pd.array([None] * n, dtype="boolean"),
            "arrival_s": np.full(n, np.nan) if arrival_s is None else np.asarray(arrival_s, dtype=float),
            "shared_prefix_id": [None] * n if shared_prefix_ids is None else shared_prefix_ids,
            "shared_prefix_tokens": (
                np.zeros(n, dtype=np.int64) if shared_prefix_ids is None else np.asarray(input_tokens, dtype=np.int64)
            ),
        }
    )
    nan = np.full(n, np.nan)
    turns = pd.DataFrame(
        {
            "program_id": ids,
            "turn_idx": np.zeros(n, dtype=np.int32),
            "input_tokens": np.asarray(input_tokens, dtype=np.int64),
            "output_tokens": np.asarray(output_tokens, dtype=np.int64),
            "reused_tokens": np.zeros(n, dtype=np.int64),
            "provider_cached_tokens": pd.array([None] * n, dtype="Int64"),
            "reasoning_tokens": pd.array([None] * n, dtype="Int64"),
            "tokens_kind": "exact",
            "tool_class": "other",
            "tool_name": [None] * n,
            "tool_duration_s": nan,
            "tool_duration_kind": [None] * n,
            "llm_latency_s": nan,
            "t_request_s": nan,
            "t_response_s": nan,
        }
    )
    return Trace(progs, turns)


#: Pricers an end-to-end replay can run with: the default roofline (what ``simulate`` uses), the refined roofline
#: (catalog/roofline.toml) and the measured-table pricer (catalog/tables.toml, refined fallback); ``KIND:apart``
#: is KIND with mixed prefill + decode attention priced apart instead of as one kernel (``[hardware]
#: mixed_attention``; the same on GPUs without the tile form).
E2E_PRICERS: Final = ("roofline", "refined", "table", "roofline:apart", "refined:apart")


def _perf(
    gpu: str,
    model: str,
    dtype: str,
    tp: int,
    catalog: Catalog,
    pricer: str = "roofline",
    kv_dtype: str = "bf16",
    async_scheduling: bool = False,
) -> PerfModel | TablePerfModel:
    """The pricer named ``pricer`` (one of :data:`E2E_PRICERS`, or ``auto``) of the deployment, on ``catalog``."""
    kind, _, mixed = pricer.partition(":")
    return catalog.pricer(
        kind,
        gpu,
        model,
        dtype,
        tp,
        mixed_attention=mixed or "one_kernel",
        kv_dtype=kv_dtype,
        async_scheduling=async_scheduling,
    )


def dist(prefix: str, values: np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    out = {f"{prefix}_mean_s": float(v.mean())}
    out.update({f"{prefix}_p{q}_s": float(np.percentile(v, q)) for q in QUANTILES})
    return out


def _rows(
    cell: pd.Series, measured: dict[str, float], simulated: dict[str, float], note: str = "", role: str = "validation"
) -> list[dict]:
    """One error row per metric both sides have (finite), in ``simulated``'s order."""
    return [
        {
            "source": cell["source"],
            "cell_id": cell["cell_id"],
            "gpu": cell["gpu"],
            "model": cell["model"],
            "dtype": cell["dtype"],
            "tp": int(cell["tp"]),
            "metric": m,
            "measured": float(measured[m]),
            "simulated": float(simulated[m]),
            "role": role,
            "note": note,
        }
        for m in simulated
        if m in measured and np.isfinite(measured[m]) and np.isfinite(simulated[m])
    ]


def _metrics(measured_tables: dict[str, pd.DataFrame], cell_id: str) -> dict[str, float]:
    m = measured_tables["metrics"]
    m = m[m["cell_id"] == cell_id]
    return dict(zip(m["metric"], m["value"].astype(float), strict=True))


def turn_metrics(res: SimResult) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    t = res.turns
    e2e = (t["finish_s"] - t["release_s"]).to_numpy()
    per = {"ttft_s": t["ttft_s"].to_numpy(), "tpot_s": t["tpot_s"].to_numpy(), "e2e_s": e2e}
    out = {**dist("ttft", per["ttft_s"]), **dist("tpot", per["tpot_s"]), **dist("e2e", e2e)}
    span = float(t["finish_s"].max() - res.programs["arrival_s"].min())
    out["throughput_output_tok_s"] = float(t["output_tokens"].sum()) / span
    return out, per
