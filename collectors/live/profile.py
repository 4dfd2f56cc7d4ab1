"""Profile a live engine's iteration times into the measured schema's ``component`` table.

Two sweeps against an OpenAI-compatible completions endpoint, every prompt distinct from its first token on (so
no request hits the prefix cache):

``prefill_iteration`` (phase prefill, scope model)
    One request at a time with ``max_tokens = 1``: seconds = median over ``repeats`` of TTFT (send -> first token)
    at ``num_tokens`` prompt tokens, ``batch_size`` 1, ``context_tokens`` 0. TTFT includes the HTTP round trip and
    the server's frontend (tokenizer-free with id prompts), i.e. it is an upper bound on the engine iteration; the
    smallest size measures that floor.
``decode_iteration`` (phase decode, scope model)
    ``batch_size`` concurrent streams with prompts of ``context`` tokens, each forced to ``decode_tokens`` output
    tokens. seconds = per stream, the decode interval over the steps in it, averaged over streams: on the
    engine's clock when the server reports vLLM's per-request metrics (``--enable-per-request-metrics``), else on
    the driver's, inside the window in which every stream has had its first token (all prefills done) and none
    has finished (:func:`decode_step_s` says why the engine's clock comes first). ``num_tokens`` = ``batch_size``
    (one new token per sequence per step), ``context_tokens`` = context + decode_tokens / 2 (the mean KV context
    per sequence over the window). With no common window (the server did not run them concurrently) all
    intervals after each stream's first token are used and the cell's config says so.

Sizes above the server's ``max_model_len`` are skipped (and listed in the cell's ``config_json``). Times are
seconds on the driver's monotonic clock. The cell is ``kind = component``, ``source = live-profile``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from collectors.live.client import CompletionClient, StreamResult, monotonic_clock
from collectors.live.endpoint import DriveOptions, EndpointInfo, MetricsPoller, discover, payload
from collectors.live.prompts import id_range
from collectors.measured.common import cell, component, frame, normalize_gpu, slug, write_measured

SOURCE = "live-profile"


@dataclass(frozen=True, slots=True)
class ProfileOptions:
    """What to measure. Sizes in tokens; ``repeats`` per prefill size."""

    prefill_sizes: tuple[int, ...] = (16, 128, 512, 1024, 2048, 4096, 8192)
    repeats: int = 3
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    contexts: tuple[int, ...] = (128, 1024, 4096)
    decode_tokens: int = 64

    def __post_init__(self) -> None:
        for name in ("prefill_sizes", "batch_sizes", "contexts"):
            v = getattr(self, name)
            if not v or min(v) < 1:
                raise ValueError(f"profile option {name} = {v!r} is invalid: a non-empty list of integers >= 1")
        if self.repeats < 1 or self.decode_tokens < 3:
            raise ValueError(
                f"profile options repeats = {self.repeats} (>= 1), decode_tokens = {self.decode_tokens} (>= 3)"
            )


@dataclass(slots=True)
class ProfileResult:
    tables: dict[str, pd.DataFrame]
    paths: dict[str, Path]
    info: EndpointInfo
    skipped: list[str] = field(default_factory=list)


class _Prompts:
    """Distinct prompts: a unique first id per request (no prefix-cache hit), then seeded random ids."""

    def __init__(self, vocab_size: int, seed: int) -> None:
        self.lo, self.hi = id_range(vocab_size)
        self.rng = np.random.default_rng([seed, 2])
        self.k = 0

    def make(self, n: int) -> list[int]:
        span = self.hi - self.lo
        ids = self.rng.integers(self.lo, self.hi, size=n).tolist()
        ids[0] = self.lo + (self.k * 7919 + 3) % span
        self.k += 1
        return ids


def decode_step_s(results: list[StreamResult]) -> tuple[float, str]:
    """``(decode step seconds, clock)``: how long one decode step of these concurrent streams took.

    ``clock`` says how it was measured, in order of preference:

    - ``"engine"``: every stream reported vLLM's per-request decode interval (``engine_decode_s``, first -> last
      output token on the engine core's clock; ``--enable-per-request-metrics``): per stream, that interval over
      the steps in it (output tokens - 1), averaged over streams. The driver's chunk times cannot be trusted for
      this: vLLM's CPU build, when its API server shares the cores with the engine, can deliver a whole stream's
      chunks in one burst after the last step (measured: 13 us "steps" for a 2.4 ms step, in most of a quiet
      machine's profile), which no statistic of the arrival times repairs. The streams start together, so their
      prompts are prefilled in the first step or two, which the interval (first -> last output token) starts
      after; its steps are decode steps of the whole batch, bar a prompt that needed a second chunk.
    - ``"window"``: on the driver's clock, per stream (last - first chunk time) / tokens in between inside the
      window in which every stream decodes, averaged over streams (a mean, not a median of inter-chunk intervals,
      which bunched delivery drives to ~0).
    - ``"stream"``: as ``"window"`` over whole streams, when the streams never all decoded together.

    NaN (clock ``"none"``) when no stream has three or more timed tokens.
    """
    engine = [
        r.engine_decode_s / (r.completion_tokens - 1)
        for r in results
        if r.engine_decode_s is not None and r.completion_tokens is not None and r.completion_tokens >= 3
    ]
    if results and len(engine) == len(results) and all(x > 0 for x in engine):
        return float(np.mean(engine)), "engine"
    start = max(r.first_token_s for r in results)
    end = min(r.last_token_s for r in results)
    for clock in ("window", "stream"):
        steps = []
        for r in results:
            pts = [(t, k) for t, k in r.chunks if clock == "stream" or start <= t <= end]
            tokens = sum(k for _, k in pts[1:])
            if pts and tokens >= max(3, sum(k for _, k in r.chunks) // 2) and pts[-1][0] > pts[0][0]:
                steps.append((pts[-1][0] - pts[0][0]) / tokens)
        if len(steps) == len(results):  # else the window is too short for some stream: use whole streams
            return float(np.mean(steps)), clock
    return float("nan"), "none"


def client_path_s(r: StreamResult) -> float | None:
    """The part of one request's time that the engine did not see: the driver's send -> last token, minus vLLM's
    own queue, scheduled -> first token and decode interval (``--enable-per-request-metrics``): HTTP, the API
    server's request handling and its delivery of the tokens. None when the server reported no such metrics."""
    q, f, d = r.engine_queue_s, r.engine_ttft_s, r.engine_decode_s
    if q is None or f is None or d is None:
        return None
    return (r.last_token_s - r.send_s) - q - f - d


async def _prefill(
    client: CompletionClient,
    info: EndpointInfo,
    opts: DriveOptions,
    prof: ProfileOptions,
    prompts: _Prompts,
    rows: list[pd.DataFrame],
    skipped: list[str],
    paths: dict[str, list[float]],
) -> None:
    for n in prof.prefill_sizes:
        if info.max_model_len and n + 1 > info.max_model_len:
            skipped.append(f"prefill {n} > max_model_len {info.max_model_len}")
            continue
        ttft = []
        for _ in range(prof.repeats):
            r = await client.complete(payload(info.model, prompts.make(n), 1, info.prompt_format, opts))
            ttft.append(r.first_token_s - r.send_s)
            if (x := client_path_s(r)) is not None:
                paths["prefill"].append(round(x, 6))
        rows.append(
            component(
                "",
                "prefill_iteration",
                "model",
                float(np.median(ttft)),
                "median",
                phase="prefill",
                num_tokens=n,
                batch_size=1,
                context_tokens=0,
            )
        )


async def _decode(
    client: CompletionClient,
    info: EndpointInfo,
    opts: DriveOptions,
    prof: ProfileOptions,
    prompts: _Prompts,
    rows: list[pd.DataFrame],
    skipped: list[str],
    fallbacks: list[str],
    clocks: dict[str, int],
    paths: dict[str, list[float]],
) -> None:
    for ctx in prof.contexts:
        if info.max_model_len and ctx + prof.decode_tokens > info.max_model_len:
            skipped.append(f"decode context {ctx} + {prof.decode_tokens} > max_model_len {info.max_model_len}")
            continue
        for b in prof.batch_sizes:
            bodies = [
                payload(info.model, prompts.make(ctx), prof.decode_tokens, info.prompt_format, opts) for _ in range(b)
            ]
            results = await asyncio.gather(*(client.complete(body, keep_chunks=True) for body in bodies))
            paths["decode"] += [round(x, 6) for r in results if (x := client_path_s(r)) is not None]
            step, clock = decode_step_s(list(results))
            clocks[clock] = clocks.get(clock, 0) + 1
            if clock == "stream":
                fallbacks.append(f"batch {b} context {ctx}: streams never all decoding together")
            if np.isfinite(step):
                rows.append(
                    component(
                        "",
                        "decode_iteration",
                        "model",
                        step,
                        "median",
                        phase="decode",
                        num_tokens=b,
                        batch_size=b,
                        context_tokens=ctx + prof.decode_tokens // 2,
                    )
                )


async def profile_async(
    endpoint: str,
    out_dir: str | os.PathLike[str],
    *,
    options: DriveOptions | None = None,
    profile: ProfileOptions | None = None,
) -> ProfileResult:
    """Measure prefill and decode iteration times of ``endpoint`` and write ``cells`` + ``component`` to
    ``out_dir``. An interrupted or failed profile writes what it measured (``partial: true``), then raises."""
    opts, prof = options or DriveOptions(), profile or ProfileOptions()
    async with CompletionClient(
        endpoint, monotonic_clock(), timeout_s=opts.timeout_s, max_retries=opts.max_retries, backoff_s=opts.backoff_s
    ) as client:
        info = await discover(client, opts)
        snap = await MetricsPoller(client, 0).scrape()
        prompts = _Prompts(opts.vocab_size, opts.seed)
        rows: list[pd.DataFrame] = []
        skipped: list[str] = []
        fallbacks: list[str] = []
        clocks: dict[str, int] = {}
        paths: dict[str, list[float]] = {"prefill": [], "decode": []}
        error: BaseException | None = None
        try:
            await _prefill(client, info, opts, prof, prompts, rows, skipped, paths)
            await _decode(client, info, opts, prof, prompts, rows, skipped, fallbacks, clocks, paths)
        except BaseException as exc:  # write what was measured first
            error = exc
    gpu_raw = opts.gpu or "unknown"
    config = {
        "partial": error is not None,
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "profile": asdict(prof),
        "driver": opts.to_dict(),
        "endpoint": info.to_dict(),
        "skipped": skipped,
        "decode_without_common_window": fallbacks,
        "decode_clock": clocks,
        "client_path_s": paths,
        "engine": {"info": snap.info, **snap.cache_config()} if snap else {"metrics_available": False},
        "prefill_seconds": "median TTFT send -> first token, max_tokens 1 (includes HTTP + frontend)",
        "decode_seconds": "mean step time per stream, averaged over the streams: on the engine's clock where the "
        "server reports per-request metrics, else over the window in which all streams decode (decode_clock: "
        "how many sizes each way)",
        "client_path_seconds": "per request (prefill sweep, decode streams): send -> last token on the driver's "
        "clock minus the engine's queue, scheduled -> first token and decode interval (vLLM per-request metrics); "
        "empty without them",
    }
    row = cell(
        "",
        SOURCE,
        gpu_raw,
        info.model,
        info.endpoint,
        tp=opts.tp,
        engine=snap.engine if snap else None,
        engine_version=info.version,
        config=config,
        kind="component",
    )
    cid = f"{SOURCE}/{normalize_gpu(gpu_raw) or slug(gpu_raw)}/{row['model']}"
    row.update(cell_id=cid, workload="iteration profile", load="prefill sweep + decode batch sweep")
    comp = frame([r.assign(cell_id=cid) for r in rows], "component") if rows else frame([], "component")
    tables = {"cells": frame([row], "cells"), "component": comp}
    paths = write_measured(out_dir, tables)
    if error is not None:
        with contextlib.suppress(Exception):  # lets the CLI say that a partial dataset was written
            error.partial_paths = paths  # type: ignore[attr-defined]
        raise error
    return ProfileResult(tables, paths, info, skipped)


def profile(endpoint: str, out_dir: str | os.PathLike[str], **kw) -> ProfileResult:
    """Synchronous :func:`profile_async`."""
    from collectors.live.driver import run_interruptible

    return run_interruptible(profile_async(endpoint, out_dir, **kw))
