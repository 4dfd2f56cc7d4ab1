"""Streaming client for an OpenAI-compatible completions endpoint (httpx, asyncio), with timeouts and retries.

One :meth:`CompletionClient.complete` call is one logical request: ``POST {endpoint}/v1/completions`` with
``stream: true``, retried with exponential backoff (``backoff_s * 2**k``) on connection errors, a stream that
ends before ``[DONE]`` / a ``finish_reason``, HTTP 5xx or 429, and the per-request timeout (``timeout_s``, the
whole request including streaming, so a stuck stream cannot hang the run). A 4xx other than 429 is never
retried: it raises :class:`EndpointRejected` with the URL, status and a body excerpt. Retries exhausted raise
:class:`EndpointUnavailable`. A retried request is reported once, with ``retries`` = failed attempts.

Times are seconds on the driver's monotonic clock, relative to the run start (``clock()``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

Clock = Callable[[], float]


class DriveError(RuntimeError):
    """The live run cannot go on; the message names the URL and what the server said."""


class EndpointUnavailable(DriveError):
    """The endpoint cannot be reached (connection refused, timeouts, 5xx after all retries)."""


class EndpointRejected(DriveError):
    """The endpoint answered 4xx: the request itself is wrong (bad model name, prompt too long...)."""

    def __init__(self, url: str, status: int, body: str) -> None:
        self.url, self.status, self.body = url, status, body
        super().__init__(f"{url} rejected the request: HTTP {status}: {excerpt(body)}")


class _Retryable(Exception):
    """One attempt failed in a way worth retrying; the message says how."""


def excerpt(body: str, n: int = 300) -> str:
    body = " ".join(body.split())
    return body if len(body) <= n else body[:n] + "..."


@dataclass(slots=True)
class StreamResult:
    """One completed request. Token times: first/last chunk carrying generated tokens (s from run start)."""

    first_send_s: float  #: send time of the first attempt
    send_s: float  #: send time of the successful attempt
    first_token_s: float
    last_token_s: float
    retries: int  #: failed attempts before the successful one
    prompt_tokens: int | None = None  #: server-reported (usage), None when the server sent no usage
    completion_tokens: int | None = None  #: server-reported (usage)
    cached_tokens: int | None = None  #: usage.prompt_tokens_details.cached_tokens when reported
    stream_tokens: int = 0  #: tokens counted from the stream (token_ids lengths, else one per text chunk)
    output_ids: list[int] | None = None  #: generated ids when the server returns them (vLLM return_token_ids)
    chunks: list[tuple[float, int]] = field(default_factory=list)  #: (time s, tokens) per token chunk, if kept
    finish_reason: str | None = None
    #: vLLM ``--enable-per-request-metrics`` (``metrics`` on the final usage chunk, built by
    #: ``vllm/entrypoints/generate/base/serving.py::build_per_request_timing_metrics`` from the engine's
    #: ``RequestStateStats``): engine queue time (queued -> first scheduled; later schedulings after a preemption
    #: do not move it) and first scheduled -> first token, in seconds; None when the server sent none.
    engine_queue_s: float | None = None
    engine_ttft_s: float | None = None
    #: ... and the decode interval, first -> last output token (``generation_time_ms``), on the engine core's clock:
    #: each step's ``EngineCoreOutputs.timestamp`` (``vllm/v1/engine/__init__.py``), so it is immune to the API
    #: server delivering several steps' chunks in one burst, which the driver's chunk times are not
    engine_decode_s: float | None = None


class CompletionClient:
    """Completions over one shared :class:`httpx.AsyncClient` (use as ``async with``)."""

    def __init__(
        self,
        endpoint: str,
        clock: Clock,
        *,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.endpoint = endpoint.rstrip("/").removesuffix("/v1")  # accept ".../v1" too
        self.url = f"{self.endpoint}/v1/completions"
        self.clock = clock
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )

    async def __aenter__(self) -> CompletionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    # ----------------------------------------------------------------------------------- plain GETs

    async def get(self, path: str, *, required: bool = False) -> httpx.Response | None:
        """``GET {endpoint}{path}``; None on a non-2xx answer or (unless ``required``) a connection error."""
        url = f"{self.endpoint}{path}"
        try:
            r = await self._http.get(url, timeout=min(self.timeout_s, 30.0))
        except httpx.HTTPError as exc:
            if required:
                raise EndpointUnavailable(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
            return None
        return r if r.is_success else None

    async def models(self) -> list[dict[str, Any]]:
        """``/v1/models`` entries (raises :class:`EndpointUnavailable` when the server cannot be reached)."""
        r = await self.get("/v1/models", required=True)
        if r is None:
            return []
        try:
            data = r.json().get("data") or []
        except (ValueError, AttributeError):
            return []
        return [d for d in data if isinstance(d, dict)]

    async def version(self) -> str | None:
        r = await self.get("/version")
        try:
            return None if r is None else str(r.json().get("version"))
        except (ValueError, AttributeError):
            return None

    async def metrics_text(self) -> str | None:
        r = await self.get("/metrics")
        return None if r is None else r.text

    # ----------------------------------------------------------------------------------- completions

    async def complete(self, payload: dict[str, Any], *, keep_chunks: bool = False) -> StreamResult:
        """Run one streamed completion with retries (see the module docstring)."""
        first_send: float | None = None
        attempt = 0
        while True:
            send = self.clock()
            first_send = send if first_send is None else first_send
            try:
                async with asyncio.timeout(self.timeout_s):
                    res = await self._once(payload, send, keep_chunks)
            except (_Retryable, httpx.TransportError, TimeoutError) as exc:
                why = (
                    f"{type(exc).__name__}: {exc}"
                    if not isinstance(exc, TimeoutError)
                    else f"no complete answer within {self.timeout_s:g} s"
                )
                if attempt >= self.max_retries:
                    raise EndpointUnavailable(
                        f"{self.url}: request failed after {attempt + 1} attempt(s): {why}"
                    ) from exc
                await asyncio.sleep(self.backoff_s * 2**attempt)
                attempt += 1
                continue
            res.first_send_s, res.retries = first_send, attempt
            return res

    async def _once(self, payload: dict[str, Any], send: float, keep_chunks: bool) -> StreamResult:
        async with self._http.stream("POST", self.url, json=payload) as resp:
            if resp.status_code >= 400:
                body = (await resp.aread()).decode("utf-8", "replace")
                if resp.status_code >= 500 or resp.status_code == 429:
                    raise _Retryable(f"HTTP {resp.status_code}: {excerpt(body, 200)}")
                raise EndpointRejected(self.url, resp.status_code, body)
            return await self._read_stream(resp, send, keep_chunks)

    async def _read_stream(self, resp: httpx.Response, send: float, keep_chunks: bool) -> StreamResult:
        first: float | None = None
        last: float | None = None
        first_any: float | None = None
        last_any: float | None = None
        n_tok, got_ids = 0, False
        ids: list[int] = []
        chunks: list[tuple[float, int]] = []
        usage: dict[str, Any] | None = None
        metrics: dict[str, Any] = {}
        finish, done = None, False
        async for line in resp.aiter_lines():
            line = line.strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                msg = json.loads(data)
            except json.JSONDecodeError as exc:
                raise _Retryable(f"malformed stream chunk {excerpt(data, 120)!r}") from exc
            now = self.clock()
            if isinstance(msg.get("error"), dict | str):
                raise _Retryable(f"error in stream: {excerpt(json.dumps(msg['error']), 200)}")
            if msg.get("usage"):
                usage = msg["usage"]
            if isinstance(msg.get("metrics"), dict):
                metrics = msg["metrics"]
            for ch in msg.get("choices") or []:
                first_any = now if first_any is None else first_any
                last_any = now
                tid = ch.get("token_ids")
                k = len(tid) if isinstance(tid, list) else (1 if ch.get("text") else 0)
                if isinstance(tid, list):
                    got_ids = True
                    ids.extend(int(x) for x in tid)
                if k:
                    first = now if first is None else first
                    last = now
                    n_tok += k
                    if keep_chunks:
                        chunks.append((now, k))
                finish = ch.get("finish_reason") or finish
        if not done and finish is None:
            raise _Retryable("stream ended before [DONE] (connection dropped?)")
        if first_any is None or last_any is None:
            raise _Retryable("stream carried no completion choices")
        u = usage or {}
        details = u.get("prompt_tokens_details") or {}
        return StreamResult(
            first_send_s=send,
            send_s=send,
            first_token_s=first if first is not None else first_any,
            last_token_s=last if last is not None else last_any,
            retries=0,
            prompt_tokens=u.get("prompt_tokens"),
            completion_tokens=u.get("completion_tokens"),
            cached_tokens=details.get("cached_tokens") if isinstance(details, dict) else None,
            stream_tokens=n_tok,
            output_ids=ids if got_ids else None,
            chunks=chunks,
            finish_reason=finish,
            engine_queue_s=_ms_to_s(metrics.get("queue_time_ms")),
            engine_ttft_s=_ms_to_s(metrics.get("time_to_first_token_ms")),
            engine_decode_s=_ms_to_s(metrics.get("generation_time_ms")),
        )


def _ms_to_s(v: object) -> float | None:
    return float(v) / 1000.0 if isinstance(v, int | float) and not isinstance(v, bool) else None


def monotonic_clock() -> Clock:
    """A clock reading seconds since this call (time.monotonic: immune to wall-clock steps)."""
    t0 = time.monotonic()
    return lambda: time.monotonic() - t0
