"""LLMPerf's client, reconstructed from its source and from what a run records.

How the client launches requests (tech-grandpa/llmperf ``token_benchmark_ray.py``,
``get_token_throughput_latencies``; the fork keeps ray-project/llmperf's ``RequestsLauncher`` and
``OpenAIChatCompletionsClient``):

- ``num_concurrent_requests`` = C Python threads start one after the other; each first builds its own client, a
  Ray actor (``construct_clients(num_clients=1)``), so a thread's first request leaves only once its actor
  process is up. These start times are not recorded: the **spread** of the launch is what this module estimates.
- Each thread loops: send one streaming request, block until its whole response is in
  (``RequestsLauncher.get_next_ready`` waits on ``ActorPool.get_next_unordered``), record it if fewer than
  ``max_num_completed_requests`` = N are recorded, and send the next one while fewer than N are recorded. Thread i
  sends prompt ``(i + k * C) % N`` in its round k, so with C = N (the runs here: 64 and 64) a thread re-sends
  its own prompt. The recorded requests are the **first N completions**, whichever round they belong to.
- The test ends when every thread has joined, i.e. when the last request in flight at the N-th completion has
  finished; that span divides both recorded throughputs (``metrics_summary``: output tokens / span,
  completed / span * 60).

The estimator (documented, measured aggregates only; never the simulator's output): thread i starts at
``A * i / (C - 1)`` (uniform spread over ``[0, A]``), every request lasts a value of the measured end-to-end
latency distribution (its quantile function through the recorded min, p25, p50, p75, p90, p95, p99 and max,
linear in between as pandas' quantiles are; values at probabilities ``(k + 0.5) / n``, shuffled per round with a
seed from the cell id), and A is the smallest spread for which this client loop ends at the measured span
(a grid over ``[0, span]``, then bisection). Assumed: a request's duration does not depend on the launch
spread (first order; the replay then lets the engine decide the durations).

From the same client model, :func:`kv_demand` counts the requests in flight over time and the KV blocks they
hold (prompt + generated tokens so far, generated linearly between first token and finish): the peak is the
KV capacity the measured latencies imply, since the measured TTFTs (p99 ~0.1 s) leave no room for a request
waiting for blocks.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Final

import numpy as np

#: The quantiles LLMPerf's ``metrics_summary`` records (``series.quantile([0.25, 0.5, 0.75, 0.9, 0.95, 0.99])``)
#: plus min and max.
QUANTILE_KEYS: Final = ((0.25, "p25"), (0.5, "p50"), (0.75, "p75"), (0.9, "p90"), (0.95, "p95"), (0.99, "p99"))
SPREAD_GRID: Final = 200  #: grid points over [0, span] before bisection


def quantile_points(dist: dict, where: str = "distribution") -> tuple[np.ndarray, np.ndarray]:
    """``(probabilities, values)`` of a raw_results distribution ``{min, max, quantiles: {p25..p99}}``."""
    q = dist.get("quantiles") if isinstance(dist, dict) else None
    if not isinstance(q, dict):
        raise ValueError(f"{where}: no 'quantiles' object ({dist!r})")
    probs, vals = [0.0], [dist.get("min")]
    for p, key in QUANTILE_KEYS:
        probs.append(p)
        vals.append(q.get(key))
    probs.append(1.0)
    vals.append(dist.get("max"))
    for p, v in zip(probs, vals, strict=True):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{where}: quantile {p} missing or not a number ({v!r})")
    out = np.asarray(vals, dtype=float)
    if np.any(np.diff(out) < 0):
        raise ValueError(f"{where}: quantiles decrease ({out.tolist()})")
    return np.asarray(probs), out


def spaced(points: tuple[np.ndarray, np.ndarray], n: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """n values of the quantile function at ``(k + 0.5) / n``, shuffled by ``rng`` (sorted when None)."""
    v = np.interp((np.arange(n) + 0.5) / n, points[0], points[1])
    return v if rng is None else rng.permutation(v)


@dataclass(frozen=True)
class ClientRun:
    """Every request the client loop sent: one entry per request, in sending order."""

    thread: np.ndarray
    round: np.ndarray
    prompt: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    recorded: np.ndarray  #: among the first N completions (what LLMPerf's summary describes)
    span_s: float  #: last finish: when the last thread joins

    @property
    def nth_completion_s(self) -> float:
        return float(self.finish_s[self.recorded].max())


def client_loop(starts: np.ndarray, durations: np.ndarray, requests: int) -> ClientRun:
    """LLMPerf's thread loop on fixed request durations: ``durations[i, k]`` is thread i's round-k request.

    Raises ValueError when a thread would need more rounds than ``durations`` has columns."""
    starts = np.asarray(starts, dtype=float)
    threads, rounds = durations.shape
    if len(starts) != threads or requests < 1:
        raise ValueError(f"{len(starts)} start times for {threads} threads, {requests} requests")
    sent: list[tuple[int, int, float, float]] = []
    heap = [(float(starts[i] + durations[i, 0]), i, 0, float(starts[i])) for i in range(threads)]
    heapq.heapify(heap)
    recorded: list[bool] = []
    count = 0
    while heap:
        fin, i, k, st = heapq.heappop(heap)
        sent.append((i, k, st, fin))
        rec = count < requests
        count += rec
        recorded.append(rec)
        if count < requests:  # the thread loops: send the next round now
            if k + 1 >= rounds:
                raise ValueError(f"thread {i} needs more than {rounds} rounds")
            heapq.heappush(heap, (fin + float(durations[i, k + 1]), i, k + 1, fin))
    a = np.asarray(sent)
    thread, rnd = a[:, 0].astype(int), a[:, 1].astype(int)
    return ClientRun(
        thread, rnd, (thread + rnd * threads) % requests, a[:, 2], a[:, 3], np.asarray(recorded), float(a[:, 3].max())
    )


def uniform_starts(threads: int, spread_s: float) -> np.ndarray:
    return np.linspace(0.0, spread_s, threads) if threads > 1 else np.zeros(1)


def solve_spread(span_s: float, durations: np.ndarray, requests: int) -> tuple[float, str]:
    """The smallest launch spread A whose client loop ends at ``span_s``, and a note; A = 0 (and the note says
    so) when even a burst ends later than the measured span."""
    threads = durations.shape[0]

    def gap(a: float) -> float:
        return client_loop(uniform_starts(threads, a), durations, requests).span_s - span_s

    if gap(0.0) >= 0:
        return 0.0, f"a burst already ends at {gap(0.0) + span_s:.2f} s >= the measured span {span_s:.2f} s"
    grid = np.linspace(0.0, span_s, SPREAD_GRID + 1)
    lo = 0.0
    for a in grid[1:]:
        if gap(float(a)) >= 0:
            hi = float(a)
            break
        lo = float(a)
    else:
        raise ValueError(f"no launch spread in [0, {span_s:.2f}] s reproduces the measured span")
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return hi, f"spread solved so that the client loop on the measured E2E ends at the measured span {span_s:.2f} s"


@dataclass(frozen=True)
class Launch:
    """The reconstructed launch: thread start times and the client loop on measured durations."""

    spread_s: float
    starts_s: np.ndarray
    client: ClientRun
    ttft_s: np.ndarray  #: measured-TTFT draws, one per request the client loop sent
    note: str


def reconstruct(
    e2e: tuple[np.ndarray, np.ndarray],
    ttft: tuple[np.ndarray, np.ndarray],
    threads: int,
    requests: int,
    span_s: float,
    seed: int,
    *,
    spread_s: float | None = None,
    max_rounds: int = 8,
) -> Launch:
    """Launch spread and client loop from the measured E2E / TTFT quantiles, the thread and request counts and
    the span; ``spread_s`` given (e.g. 0 for a burst) skips the solve."""
    rng = np.random.default_rng(seed)
    durations = np.column_stack([spaced(e2e, threads, rng) for _ in range(max_rounds)])
    if spread_s is None:
        spread_s, note = solve_spread(span_s, durations, requests)
    else:
        note = f"spread set to {spread_s:.2f} s"
    starts = uniform_starts(threads, spread_s)
    run = client_loop(starts, durations, requests)
    tt = np.minimum(spaced(ttft, len(run.start_s), rng), run.finish_s - run.start_s)
    return Launch(float(spread_s), starts, run, tt, note)


@dataclass(frozen=True)
class KvDemand:
    times_s: np.ndarray
    in_flight: np.ndarray
    blocks: np.ndarray

    @property
    def peak_blocks(self) -> int:
        return int(self.blocks.max())

    @property
    def peak_in_flight(self) -> int:
        return int(self.in_flight.max())


def kv_demand(
    launch: Launch, input_tokens: np.ndarray, output_tokens: np.ndarray, block_size: int = 16, points: int = 2000
) -> KvDemand:
    """Requests in flight and KV blocks held over the client loop: a request holds ``ceil((prompt + generated)
    / block_size)`` blocks from its start (vLLM allocates the prompt's blocks when it schedules the prefill,
    ``KVCacheManager.allocate_slots``) to its finish, generating linearly between its first token and finish.
    Evaluated on a grid and just before every finish (where the sum peaks)."""
    run = launch.client
    st, fin, tt = run.start_s, run.finish_s, launch.ttft_s
    inp = np.asarray(input_tokens, dtype=float)[run.prompt]
    out = np.asarray(output_tokens, dtype=float)[run.prompt]
    times = np.unique(np.concatenate([np.linspace(0.0, run.span_s, points), fin - 1e-9]))
    live = (times[:, None] >= st[None, :]) & (times[:, None] < fin[None, :])
    frac = np.clip((times[:, None] - st[None, :] - tt[None, :]) / np.maximum(fin - st - tt, 1e-12)[None, :], 0, 1)
    blocks = np.where(live, np.ceil((inp[None, :] + out[None, :] * frac) / block_size), 0.0).sum(axis=1)
    return KvDemand(times, live.sum(axis=1), blocks)
