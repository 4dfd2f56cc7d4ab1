"""The figures a drive and a simulation of the same cell are compared on, and the client path between them.

The client path is the time a turn spends outside the engine (HTTP, API server, driver), read from vLLM's
per-request metrics; the simulator models an engine, so each turn's measured path is replayed around it
(:func:`with_client_path`, :func:`sim_figures`). The admission order of both sides is read the same way
(:func:`validation.e2e.live.admission_order`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from validation.e2e import live as live_check


# ---- the client path -------------------------------------------------------------------------------------------
def client_path(live: Any) -> dict[str, list[Any]] | None:
    """Per turn of a drive, the time the engine did not see (seconds), from vLLM's per-request metrics:

    - ``first_s``: release -> first token on the driver's clock minus the engine's queue and scheduled -> first
      token (the request's way in plus the first token's way out);
    - ``total_s``: release -> last token minus the engine's queue, scheduled -> first token and decode interval.

    This is HTTP, the API server and the driver, which share one of the machine's two cores (and other jobs'
    load); the simulator models an engine, not them. Measured with the engine core deprioritized (3 December
    2026, README §5c): a mean 26-43 ms a turn on a quiet machine (median 7-9 ms, p99 0.22-0.66 s), 54-81 ms under
    one competing busy process (median 22-35 ms, p99 0.3-0.97 s): 8-20% of a program's JCT, more than the engine's
    own TTFT. None when a turn lacks the metrics (an older sidecar)."""
    t = live.turns
    cols = ("engine_queue_s", "engine_ttft_s", "engine_decode_s")
    if any(c not in t for c in cols):
        return None
    q, f, d = (pd.to_numeric(t[c]).to_numpy(dtype=float) for c in cols)
    rel = t["release_s"].to_numpy(dtype=float)
    first = t["first_token_s"].to_numpy(dtype=float) - rel - q - f
    total = t["last_token_s"].to_numpy(dtype=float) - rel - q - f - d
    if not (np.isfinite(first).all() and np.isfinite(total).all()):
        return None
    return {
        "program_id": t["program_id"].astype(str).tolist(),
        "turn_idx": t["turn_idx"].astype(int).tolist(),
        "first_s": np.round(np.maximum(first, 0.0), 6).tolist(),
        "total_s": np.round(np.maximum(total, 0.0), 6).tolist(),
    }


def with_client_path(w: Any, client: dict[str, list[Any]], tool_scale: float) -> Any:
    """The workload with each turn's measured client path replayed: turn k > 0 of a program reaches the engine
    ``total_s`` of that turn after the scaled tool gap that precedes it (so the gap array becomes the replayed
    gaps: tools mode ``replay``, scale 1). All of a turn's client path is placed before the engine sees it; its
    real split (the request's way in, the tokens' way out) is not measured, and only moves it within the turn.
    A program's first turn reaches the engine at once; :func:`sim_figures` adds its client path to the JCT."""
    tot = {(p, k): x for p, k, x in zip(client["program_id"], client["turn_idx"], client["total_s"], strict=True)}
    tool = np.asarray(w.tool_s, dtype=float) * tool_scale
    for p, pid in enumerate(w.program_ids):
        lo, hi = int(w.turn_start[p]), int(w.turn_start[p + 1])
        for k in range(1, hi - lo):
            if (pid, k) not in tot:
                raise ValueError(f"client path: no measured turn {k} of program {pid!r} in the drive")
            tool[lo + k - 1] += tot[(pid, k)]
    return dataclasses.replace(w, tool_s=tool)


# ---- comparison ------------------------------------------------------------------------------------------------
def _stats(x: np.ndarray) -> dict[str, float]:
    x = x[np.isfinite(x)]
    return {"mean": float(x.mean()), "p50": float(np.quantile(x, 0.5)), "p90": float(np.quantile(x, 0.9))}


def live_figures(live: Any) -> dict[str, float]:
    t = live.turns
    out = t["output_tokens"].to_numpy(dtype=float)
    first, last = t["first_token_s"].to_numpy(dtype=float), t["last_token_s"].to_numpy(dtype=float)
    multi = out > 1
    m = dict(zip(live.tables["metrics"]["metric"], live.tables["metrics"]["value"], strict=True))
    jct = live.tables["programs"]["jct_s"].to_numpy(dtype=float)
    arrival = t.groupby("program_id")["release_s"].min()
    finish = t.groupby("program_id")["last_token_s"].max()
    # the engine's own decode interval per turn (vLLM's per-request metrics; absent from older sidecars)
    dec = pd.to_numeric(t["engine_decode_s"]).to_numpy(dtype=float) if "engine_decode_s" in t else None
    engine_tpot = (
        float(np.mean(dec[multi] / (out[multi] - 1)))
        if dec is not None and multi.any() and np.isfinite(dec[multi]).all()
        else math.nan
    )
    return {
        **{f"jct_{k}_s": v for k, v in _stats(jct).items()},
        "ttft_mean_s": float(np.mean(first - t["release_s"].to_numpy(dtype=float))),
        "tpot_mean_s": float(np.mean((last[multi] - first[multi]) / (out[multi] - 1))),
        "engine_tpot_mean_s": engine_tpot,
        "makespan_s": float(finish.max() - arrival.min()),
        "cached_tokens": float(pd.to_numeric(t["cached_tokens_reported"]).fillna(0).sum()),
        "engine_hit_tokens": float(m.get("prefix_cache_hit_tokens", math.nan)),
        "engine_query_tokens": float(m.get("prefix_cache_query_tokens", math.nan)),
        "preemptions": float(m.get("preemptions", math.nan)),
        "turns": float(len(t)),
        **_order(engine_admissions(live)),
    }


def sim_figures(sim: Any, client: dict[str, list[Any]] | None = None) -> dict[str, float]:
    """The simulator's figures; with a replayed ``client`` path (:func:`with_client_path`) a turn's TTFT (from the
    moment the simulated engine saw it) gains its ``first_s``, and a program's JCT its first turn's ``total_s``
    (the one not replayed before the engine)."""
    t, p = sim.turns, sim.programs
    tpot = float(np.nanmean(t["tpot_s"].to_numpy(dtype=float)))
    ttft = t["ttft_s"].to_numpy(dtype=float)
    jct = p["jct_s"].to_numpy(dtype=float)
    if client is not None:
        key = list(zip(client["program_id"], client["turn_idx"], strict=True))
        first = dict(zip(key, client["first_s"], strict=True))
        total = dict(zip(key, client["total_s"], strict=True))
        ttft = ttft + np.array([first[(a, int(b))] for a, b in zip(t["program_id"], t["turn_idx"], strict=True)])
        jct = jct + np.array([total[(a, 0)] for a in p["program_id"]])
    return {
        **{f"jct_{k}_s": v for k, v in _stats(jct).items()},
        "ttft_mean_s": float(np.nanmean(ttft)),
        "tpot_mean_s": tpot,
        "engine_tpot_mean_s": tpot,  # the simulator has no API server: its one clock is the engine's
        "makespan_s": float(sim.summary["makespan_s"]),
        "cached_tokens": float(t["cached_tokens"].sum()),
        "engine_hit_tokens": math.nan,
        "engine_query_tokens": math.nan,
        "preemptions": float(t["preemptions"].sum()),
        "turns": float(len(t)),
        **_order(pd.DataFrame({"arrive_s": t["release_s"], "admit_s": t["first_scheduled_s"]})),
    }


def _order(adm: pd.DataFrame) -> dict[str, float]:
    o = live_check.admission_order(adm["arrive_s"].to_numpy(dtype=float), adm["admit_s"].to_numpy(dtype=float))
    return {"admission_fcfs": o["fcfs"], "admission_pairs": o["pairs"], "queued_turns": o["queued"]}


def engine_admissions(live: Any) -> pd.DataFrame:
    """Per turn, on the driver's clock: entering the engine core's queue and first scheduling. vLLM reports first
    scheduled -> first token and queued -> first scheduled (``--enable-per-request-metrics``, from
    ``RequestStateStats``; a preemption does not move ``scheduled_ts``: ``vllm/v1/metrics/stats.py``), so
    admission = the first token's arrival minus the former, arrival = admission minus the latter."""
    t = live.turns
    admit = t["first_token_s"].to_numpy(dtype=float) - pd.to_numeric(t["engine_ttft_s"]).to_numpy(dtype=float)
    return pd.DataFrame(
        {
            "program_id": t["program_id"].astype(str),
            "turn_idx": t["turn_idx"].astype(int),
            "arrive_s": admit - pd.to_numeric(t["engine_queue_s"]).to_numpy(dtype=float),
            "admit_s": admit,
        }
    )
