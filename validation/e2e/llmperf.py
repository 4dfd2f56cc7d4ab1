"""The ``llmperf`` end-to-end cells: LLMPerf closed-loop runs (aggregates only), replayed with the client
reconstructed from its source (:mod:`validation.e2e.llmperf_client`).

The replay: one program per client thread, arriving at the thread's reconstructed start time, whose turns are
the thread's requests (its prompt re-sent, no gap: the thread loops at once). The engine decides every
latency; the client's rule decides which requests exist: the first N completions are recorded, and a thread
sends another request only when it finishes while fewer than N are recorded. The trace is simulated, cut to the
requests the client would have sent given the simulated completion order, and simulated again (a cut only
removes requests sent after the N-th completion, so what came before stays the same; checked).

Compared, for the recorded requests: TTFT, ITL as LLMPerf defines it (:func:`llmperf_itl`), E2E (mean, p50, p90,
p95, p99), and over the simulated span the output and request throughput. The throughputs are ``judged =
False``: the launch spread was solved so that the client loop on the measured E2E reproduces the measured span,
so they repeat the measured span up to the latency error (:data:`FIXED_BY_CONSTRUCTION`).

Engine settings the source does not record (:data:`UNRECORDED`) are taken at vLLM's defaults; the figures'
sensitivity to each is :func:`llmperf_sensitivity`.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.perf.memory import DEFAULT_BLOCK_SIZE, kv_capacity
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import CapacityError, simulate
from agentreplay.trace.io import Trace
from validation.catalog import Catalog
from validation.components.profiles import iteration_floor_s
from validation.e2e.common import _metrics, _perf, _rows, dist
from validation.e2e.llmperf_client import Launch, kv_demand, quantile_points, reconstruct

FIXED_BY_CONSTRUCTION: Final = {
    "throughput_output_tok_s": "fixed by construction: the launch spread is solved so that the client loop on the "
    "measured E2E ends at the measured span, which this throughput divides by",
    "throughput_req_s": "fixed by construction: 64 requests over a span the launch spread was solved to reproduce",
}
#: Engine settings an LLMPerf run does not record, with what the replay assumes.
UNRECORDED: Final = {
    "gpu_memory_utilization": "vLLM default 0.9",
    "max_model_len": "not modelled: vLLM's default for Llama-3.1 (131,072 tokens = 8,192 blocks) needs more KV than "
    "a 24 GB card holds, and vLLM refuses to start then (vllm/v1/core/kv_cache_utils.py "
    "_check_enough_kv_cache_memory), so the run set a smaller one; it changes nothing else here "
    "except, in vLLM V0 without chunked prefill, the batched-token budget "
    "(max(max_model_len, 2048)): see max_num_batched_tokens",
    "max_num_seqs": "vLLM default 256 (>= the 64 threads)",
    "max_num_batched_tokens": "vLLM default 2048 on GPUs under 70 GiB (EngineArgs.get_batch_defaults)",
    "prefix_cache": "off: no prompt cached (vLLM V0, current when the runs were made, left prefix caching off); "
    "see PREFIX_STATES",
    "vllm_version": "the simulator's vLLM v1 scheduler (reserve_full_isl on, as current vLLM)",
    "gpu_count": "1 GPU, TP 1",
}
#: prefix-cache states a replay can assume: ``off`` (no prompt cached: vLLM V0's default, current when the runs
#: were made), ``resend`` (prefix caching on, cold: a thread's re-sent prompt hits its first send's blocks),
#: ``warm`` (on, and every prompt cached by an earlier identical run: the client seeds its prompt sampler,
#: ``random.seed(11111)``, so every run sends the same 64 prompts).
PREFIX_STATES: Final = ("off", "resend", "warm")
WARM_OFFSET_S: Final = 1000.0  #: the warm-up run ends long before the replayed run starts at this time
METRIC_ORDER: Final = ("ttft", "itl", "e2e")
SENSITIVITY: Final = (  # (setting, values); the first value of each is the replay's default
    ("arrivals", ("reconstructed", "burst")),
    ("gpu_memory_utilization", (0.9, 0.8, 0.95)),
    ("max_num_seqs", (256, 128, 32)),
    ("max_num_batched_tokens", (2048, 512, 8192)),
    ("prefix_cache", PREFIX_STATES),
    ("reserve_full_isl", (True, False)),
    ("tp", (1, 2)),
)


def llmperf_requests(cell: pd.Series, meas: dict[str, float], n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(input tokens, output tokens) in the served model's tokens, and r = Llama-2 tokens per model token."""
    cfg = json.loads(cell["config_json"])
    req_in, req_out = cfg["requested_input_tokens"], cfg["requested_output_tokens"]
    r = meas["output_tokens_mean"] / float(req_out["mean"])
    rng = np.random.default_rng(zlib.crc32(str(cell["cell_id"]).encode()))
    inp = rng.normal(meas["input_tokens_mean"], float(req_in["stddev"]), n) / r
    out = rng.normal(float(req_out["mean"]), float(req_out["stddev"]), n)
    return np.maximum(np.rint(inp), 1).astype(np.int64), np.maximum(np.rint(out), 2).astype(np.int64), r


def llmperf_itl(e2e_s: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """LLMPerf's per-request "inter-token latency": the client sums the gaps between content chunks starting
    from the request's send time (so the TTFT is the first gap) and divides by every SSE chunk it received,
    the role chunk that vLLM's chat stream sends first included (tech-grandpa/llmperf ``token_benchmark_ray.py``
    divides ``INTER_TOKEN_LAT`` by ``NUM_OUTPUT_TOKENS`` = ``tokens_received`` of
    ``openai_chat_completions_client.py`` before replacing it with the re-tokenised count): end-to-end time /
    (output tokens + 1), one token per chunk. Not vLLM's TPOT, which leaves the first token out."""
    return np.asarray(e2e_s, dtype=float) / (np.asarray(output_tokens, dtype=float) + 1.0)


def cell_launch(cell: pd.Series, meas: dict[str, float], *, spread_s: float | None = None) -> tuple[Launch, int]:
    """The reconstructed launch of a cell (and N, the recorded request count); ValueError naming the cell and
    field when the run does not record what the reconstruction needs."""
    cfg = json.loads(cell["config_json"])
    where = f"{cell['cell_id']}: config_json"
    dists = cfg.get("distributions")
    if not isinstance(dists, dict):
        raise ValueError(f"{where} has no 'distributions' (collected by an older collector: collect again)")
    if cfg.get("number_errors"):
        raise ValueError(
            f"{where}.number_errors = {cfg['number_errors']}: errored requests count towards the "
            "client's stop rule but their timing is not recorded; not reconstructed"
        )
    n = int(meas["completed_requests"])
    threads = int(cfg.get("num_concurrent_requests") or 0)
    if threads < 1:
        raise ValueError(f"{where}.num_concurrent_requests = {cfg.get('num_concurrent_requests')!r}")
    span = cfg.get("test_span_s")
    if not isinstance(span, int | float) or span <= 0:
        raise ValueError(f"{where}.test_span_s = {span!r}")
    e2e = quantile_points(dists.get("end_to_end_latency_s", {}), f"{where}.distributions.end_to_end_latency_s")
    ttft = quantile_points(dists.get("ttft_s", {}), f"{where}.distributions.ttft_s")
    seed = zlib.crc32(f"{cell['cell_id']}/launch".encode())
    return reconstruct(e2e, ttft, threads, n, float(span), seed, spread_s=spread_s), n


def client_trace(
    starts: np.ndarray,
    rounds: np.ndarray,
    threads: int,
    requests: int,
    inp: np.ndarray,
    out: np.ndarray,
    model: str,
    prefix: str = "off",
) -> Trace:
    """One program per client thread (arriving at its start), one turn per request it sends: round k of thread i
    sends prompt ``(i + k * threads) % requests``. ``prefix`` (:data:`PREFIX_STATES`): with ``resend`` and
    ``warm`` every prompt is a prefix shared by the requests that send it (all but its last token: vLLM
    recomputes that one on a full hit); ``warm`` adds a warm-up program per prompt (one output token) that runs
    before the replayed run, which then starts at :data:`WARM_OFFSET_S`."""
    if prefix not in PREFIX_STATES:
        raise ValueError(f"prefix = {prefix!r}: one of {list(PREFIX_STATES)}")
    rounds = np.asarray(rounds, dtype=np.int64)
    if np.any(rounds > 1) and threads % requests and prefix != "off":
        raise ValueError(
            f"{threads} threads, {requests} requests: a thread's prompts differ, one prefix per "
            "thread cannot stand for them"
        )
    ids = [f"thread{i:03d}" for i in range(threads)]
    first = np.arange(threads) % requests
    offset = WARM_OFFSET_S if prefix == "warm" else 0.0
    shared = [f"prompt{p}" if prefix != "off" else None for p in first]
    progs = pd.DataFrame(
        {
            "program_id": ids,
            "source": "validation",
            "task_id": ids,
            "agent": "llmperf-client",
            "model": model,
            "n_turns": rounds.astype(np.int32),
            "resolved": pd.array([None] * threads, dtype="boolean"),
            "arrival_s": offset + np.asarray(starts, dtype=float),
            "shared_prefix_id": shared,
            "shared_prefix_tokens": (inp[first] - 1 if prefix != "off" else np.zeros(threads)).astype(np.int64),
        }
    )
    th = np.repeat(np.arange(threads), rounds)
    k = np.concatenate([np.arange(r) for r in rounds])
    prompt = (th + k * threads) % requests
    last = np.r_[th[1:] != th[:-1], True]
    pid, tin, tout = [ids[i] for i in th], inp[prompt], out[prompt]
    if prefix == "warm":
        warm = [f"warmup{p:03d}" for p in range(requests)]
        progs = pd.concat(
            [
                progs,
                pd.DataFrame(
                    {
                        "program_id": warm,
                        "source": "validation",
                        "task_id": warm,
                        "agent": "llmperf-warmup",
                        "model": model,
                        "n_turns": np.ones(requests, dtype=np.int32),
                        "resolved": pd.array([None] * requests, dtype="boolean"),
                        "arrival_s": np.zeros(requests),
                        "shared_prefix_id": [f"prompt{p}" for p in range(requests)],
                        "shared_prefix_tokens": (inp - 1).astype(np.int64),
                    }
                ),
            ],
            ignore_index=True,
        )
        pid, tin, tout = pid + warm, np.r_[tin, inp], np.r_[tout, np.ones(requests, dtype=np.int64)]
        k, last = np.r_[k, np.zeros(requests, dtype=np.int64)], np.r_[last, np.ones(requests, dtype=bool)]
    m = len(pid)
    turns = pd.DataFrame(
        {
            "program_id": pid,
            "turn_idx": k.astype(np.int32),
            "input_tokens": tin.astype(np.int64),
            "output_tokens": tout.astype(np.int64),
            "reused_tokens": np.zeros(m, dtype=np.int64),
            "provider_cached_tokens": pd.array([None] * m, dtype="Int64"),
            "reasoning_tokens": pd.array([None] * m, dtype="Int64"),
            "tokens_kind": "exact",
            "tool_class": "other",
            "tool_name": [None] * m,
            "tool_duration_s": np.where(last, np.nan, 0.0),
            "tool_duration_kind": [None if x else "measured" for x in last],
            "llm_latency_s": np.full(m, np.nan),
            "t_request_s": np.full(m, np.nan),
            "t_response_s": np.full(m, np.nan),
        }
    )
    return Trace(progs, turns)


def client_cut(turns: pd.DataFrame, threads: int, requests: int) -> tuple[np.ndarray, np.ndarray]:
    """Apply the client's rule to simulated completions: (requests each thread sends, recorded mask over
    ``turns``). Walks completions in finish order: the first N are recorded, and a thread sends its next
    request only if fewer than N are recorded once its request is counted."""
    if not turns["program_id"].str.startswith("thread").all():
        raise ValueError("client_cut takes the client threads' turns only")
    order = np.argsort(turns["finish_s"].to_numpy(), kind="stable")
    th = turns["program_id"].str.slice(6).astype(int).to_numpy()
    k = turns["turn_idx"].to_numpy()
    sends = np.ones(threads, dtype=np.int64)
    recorded = np.zeros(len(turns), dtype=bool)
    count = 0
    for j in order:
        if k[j] >= sends[th[j]]:
            continue  # a request the client never sent (beyond the cut)
        recorded[j] = count < requests
        count += recorded[j]
        if count < requests:
            sends[th[j]] = k[j] + 2
    return sends, recorded


def replay(
    cell: pd.Series,
    catalog: Catalog,
    launch: Launch,
    n: int,
    inp: np.ndarray,
    out: np.ndarray,
    settings: dict[str, Any] | None = None,
    pricer: str = "roofline",
) -> tuple[pd.DataFrame, Any]:
    """Simulate the reconstructed client: (turns of the requests sent, with a ``recorded`` column; SimResult)."""
    s = settings or {}
    threads = len(launch.starts_s)
    tp = int(s.get("tp", 1))
    cfg = SimConfig().replace(
        hardware={"gpu": cell["gpu"], "model": cell["model"], "dtype": cell["dtype"], "tp": tp},
        workload={"arrival": "trace"},
        cache={"gpu_memory_utilization": float(s.get("gpu_memory_utilization", 0.9))},
        scheduler={
            "max_num_seqs": s.get("max_num_seqs"),
            "max_num_batched_tokens": s.get("max_num_batched_tokens"),
            "reserve_full_isl": bool(s.get("reserve_full_isl", True)),
        },
    )
    perf = _perf(cell["gpu"], cell["model"], cell["dtype"], tp, catalog, pricer)
    prefix = str(s.get("prefix_cache", "off"))
    rounds = np.bincount(launch.client.thread, minlength=threads) + 2  # room for the simulated order to differ
    for _ in range(4):
        res = simulate(
            client_trace(launch.starts_s, rounds, threads, n, inp, out, cell["model"], prefix), cfg, perf=perf
        )
        turns = res.turns[res.turns["program_id"].str.startswith("thread")].reset_index(drop=True)
        if prefix == "warm":
            turns = turns.assign(**{c: turns[c] - WARM_OFFSET_S for c in ("release_s", "first_token_s", "finish_s")})
        sends, recorded = client_cut(turns, threads, n)
        if np.any(sends > rounds):
            rounds = np.maximum(rounds, sends) + 2
            continue
        if np.array_equal(sends, rounds):
            t = turns.assign(recorded=recorded)
            if int(recorded.sum()) != n:
                raise RuntimeError(f"{cell['cell_id']}: {int(recorded.sum())} recorded requests, expected {n}")
            return t, res
        rounds = sends
    raise RuntimeError(f"{cell['cell_id']}: the client cut did not settle after 4 simulations")


def _sim_metrics(turns: pd.DataFrame, n: int, r: float) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    rec = turns[turns["recorded"]]
    e2e = (rec["finish_s"] - rec["release_s"]).to_numpy()
    per = {"ttft_s": rec["ttft_s"].to_numpy(), "e2e_s": e2e, "itl_s": llmperf_itl(e2e, rec["output_tokens"].to_numpy())}
    sim: dict[str, float] = {}
    for prefix in METRIC_ORDER:
        v = per[f"{prefix}_s"]
        sim.update(dist(prefix, v))
        sim[f"{prefix}_p95_s"] = float(np.percentile(v, 95))
    span = float(turns["finish_s"].max())  # the test starts at 0 (start_time, before the first thread)
    sim["throughput_output_tok_s"] = float(rec["output_tokens"].sum()) * r / span  # Llama-2 tokens, as measured
    sim["throughput_req_s"] = n / span
    return sim, {**per, "span_s": np.array([span])}


def _judge(rows: list[dict], spread_solved: bool = True) -> list[dict]:
    """``judged`` on every row: False for a throughput when the launch spread was solved to reproduce the
    measured span (a launch set by hand, e.g. a burst, fixes nothing)."""
    for x in rows:
        why = FIXED_BY_CONSTRUCTION.get(x["metric"]) if spread_solved else None
        x["judged"] = why is None
        if why:
            x["note"] = f"{why}. {x['note']}"
    return rows


def llmperf(
    cell: pd.Series,
    tables: dict[str, pd.DataFrame],
    catalog: Catalog,
    *,
    burst: bool = False,
    pricer: str = "roofline",
    settings: dict[str, Any] | None = None,
) -> tuple[list[dict], dict[str, Any]]:
    """Replay one LLMPerf run with the reconstructed client (``burst``: every thread starts at 0 instead)."""
    meas = _metrics(tables, cell["cell_id"])
    launch, n = cell_launch(cell, meas, spread_s=0.0 if burst else None)
    inp, out, r = llmperf_requests(cell, meas, n)
    turns, res = replay(cell, catalog, launch, n, inp, out, settings, pricer)
    sim, per = _sim_metrics(turns, n, r)
    demand = kv_demand(launch, inp, out)
    spec, gpu = catalog.model(cell["model"]), catalog.gpu(cell["gpu"])
    default_blocks = kv_capacity(gpu, spec, cell["dtype"], 1).blocks
    sim_blocks = int(res.summary["cluster"]["num_gpu_blocks"])
    floor = iteration_floor_s(spec, gpu, "prefill_iteration", float(np.mean(inp)), 1, cell["dtype"])
    # every prompt and output token of the run once through the linear layers, at the datasheet peak
    run_floor = iteration_floor_s(spec, gpu, "prefill_iteration", float(inp.sum() + out.sum()), 1, cell["dtype"])
    c = launch.client
    note = (
        f"reconstructed LLMPerf client: {len(launch.starts_s)} threads started over {launch.spread_s:.2f} s "
        f"({launch.note}); {len(turns)} requests sent, the first {n} completions recorded; inputs "
        f"{inp.mean():.0f} / outputs {out.mean():.0f} model tokens (r = {r:.3f} Llama-2 tokens per token); "
        f"on the measured E2E the client keeps up to {demand.peak_in_flight} in flight holding "
        f"{demand.peak_blocks:,} KV blocks at the peak, the simulator has {sim_blocks:,}; prefill of the mean "
        f"prompt at the datasheet peak >= {floor:.3f} s, measured mean TTFT {meas['ttft_mean_s']:.3f} s"
    )
    rows = _judge(_rows(cell, meas, sim, note), spread_solved=not burst)
    extra = {
        "simulated": per,
        "summary": res.summary,
        "ttft_floor_s": floor,
        "measured_ttft_mean_s": meas["ttft_mean_s"],
        "run_floor_s": run_floor,
        "measured_span_s": float(json.loads(cell["config_json"])["test_span_s"]),
        "gpu_dtype": f"{cell['gpu']} {cell['dtype']}",
        "launch": {
            "spread_s": launch.spread_s,
            "threads": len(launch.starts_s),
            "requests": n,
            "client_model_sent": len(c.start_s),
            "client_model_recorded_resends": int((c.round[c.recorded] > 0).sum()),
            "nth_completion_s": c.nth_completion_s,
            "simulated_sent": len(turns),
        },
        "kv": {
            "implied_peak_blocks": demand.peak_blocks,
            "implied_peak_in_flight": demand.peak_in_flight,
            "simulator_blocks": sim_blocks,
            "default_blocks": default_blocks,
            # vLLM refuses to start when one max_model_len sequence does not fit the KV cache
            # (kv_cache_utils._check_enough_kv_cache_memory): the default (the model's context) then
            # cannot have been the run's, which set max_model_len <= these tokens
            "default_max_model_len": spec.max_position_embeddings,
            "default_max_model_len_starts": spec.max_position_embeddings <= default_blocks * DEFAULT_BLOCK_SIZE,
            "max_model_len_at_most": default_blocks * DEFAULT_BLOCK_SIZE,
            "simulated_preemptions": int(turns["preemptions"].sum()),
            "simulated_peak_queued_s": float(turns["queued_s"].max()),
        },
    }
    return rows, extra


def _select(tables: dict[str, pd.DataFrame], gpu_dtypes: tuple[tuple[str, str], ...]) -> pd.DataFrame:
    cells = tables["cells"]
    keep = np.zeros(len(cells), dtype=bool)
    for g, d in gpu_dtypes:
        keep |= ((cells["source"] == "llmperf") & (cells["gpu"] == g) & (cells["dtype"] == d)).to_numpy()
    return cells[keep]


def llmperf_sensitivity(
    tables: dict[str, pd.DataFrame],
    catalog: Catalog,
    gpu_dtypes: tuple[tuple[str, str], ...] = (("rtx3090", "bf16"), ("rtx3090", "fp8")),
    sensitivity: tuple[tuple[str, tuple[Any, ...]], ...] = SENSITIVITY,
) -> pd.DataFrame:
    """The replay's errors with each unrecorded engine setting (and the launch: reconstructed or one burst) at
    2-3 plausible values, the others at the replay's defaults (:data:`UNRECORDED`): rows as :func:`llmperf`'s
    plus ``setting``, ``value`` and ``rel_error``, for every run of the given GPU / dtype pairs. A setting the
    simulator cannot run (e.g. too little KV for a request) gives one row per cell with the reason in ``note``
    and no figures."""
    rows: list[dict] = []
    for _, cell in _select(tables, gpu_dtypes).iterrows():
        base, _ = llmperf(cell, tables, catalog)
        for setting, values in sensitivity:
            for i, value in enumerate(values):
                tag = {"setting": setting, "value": str(value)}
                if i == 0:
                    rows.extend({**x, **tag} for x in base)
                    continue
                try:
                    if setting == "arrivals":
                        r, _ = llmperf(cell, tables, catalog, burst=value == "burst")
                    else:
                        r, _ = llmperf(cell, tables, catalog, settings={setting: value})
                except (CapacityError, ValueError) as exc:
                    rows.append(
                        {
                            "source": "llmperf",
                            "cell_id": cell["cell_id"],
                            "gpu": cell["gpu"],
                            "dtype": cell["dtype"],
                            "note": f"not simulated: {exc}",
                            **tag,
                        }
                    )
                    continue
                rows.extend({**x, **tag} for x in r)
    df = pd.DataFrame(rows)
    if len(df) and "measured" in df:
        df["rel_error"] = df["simulated"] / df["measured"] - 1
    return df


def llmperf_burst(tables: dict[str, pd.DataFrame], catalog: Catalog) -> pd.DataFrame:
    """Launch sensitivity of the LLMPerf RTX 3090 BF16 cells: every client thread starting at t = 0 instead of the
    reconstructed spread (throughput, mean TTFT and E2E; rows as :func:`llmperf_sensitivity`'s)."""
    df = llmperf_sensitivity(tables, catalog, (("rtx3090", "bf16"),), (("arrivals", ("reconstructed", "burst")),))
    if not len(df):
        return df
    keep = df["metric"].isin(("throughput_output_tok_s", "ttft_mean_s", "e2e_mean_s")) & (df["value"] == "burst")
    return df[keep].reset_index(drop=True)


def main(argv: list[str] | None = None) -> None:
    """``python -m validation.e2e.llmperf [MEASUREMENTS_DIR] [--sensitivity]``: every simulable LLMPerf run
    replayed with the reconstructed client (mean errors, launch, KV), and with ``--sensitivity`` the mean error
    per GPU / dtype for each unrecorded setting's values."""
    import argparse

    from agentreplay.perf import list_gpus
    from validation.measured import collect_path, default_root

    ap = argparse.ArgumentParser(prog="python -m validation.e2e.llmperf")
    ap.add_argument(
        "measurements",
        nargs="?",
        default=str(default_root() / "serving-llmperf"),
    )
    ap.add_argument("--sensitivity", action="store_true")
    a = ap.parse_args(argv)
    tables = collect_path(Path(a.measurements)).tables
    cells = tables["cells"][tables["cells"]["gpu"].isin(list_gpus())]
    keys = ["ttft_mean_s", "itl_mean_s", "e2e_mean_s", "throughput_output_tok_s"]
    out = []
    for _, cell in cells.iterrows():
        rows, extra = llmperf(cell, tables, None)
        err = {x["metric"]: 100 * (x["simulated"] / x["measured"] - 1) for x in rows}
        out.append(
            {
                "gpu": cell["gpu"],
                "dtype": cell["dtype"],
                "run": cell["cell_id"].split("/", 1)[1],
                **{k: err[k] for k in keys},
                "spread_s": extra["launch"]["spread_s"],
                "implied_blocks": extra["kv"]["implied_peak_blocks"],
                "sim_blocks": extra["kv"]["simulator_blocks"],
            }
        )
    df = pd.DataFrame(out)
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(df.round(2).to_string(index=False))
        print(df.groupby(["gpu", "dtype"])[keys].mean().round(1).to_string())
        if a.sensitivity:
            pairs = tuple(sorted(set(zip(df["gpu"], df["dtype"], strict=True))))
            s = llmperf_sensitivity(tables, None, pairs)
            s = s[s["metric"].isin(keys)]
            print(
                (
                    100
                    * s.pivot_table(
                        index=["gpu", "dtype", "setting", "value"], columns="metric", values="rel_error", sort=False
                    )[keys]
                )
                .round(1)
                .to_string()
            )


if __name__ == "__main__":
    main()
