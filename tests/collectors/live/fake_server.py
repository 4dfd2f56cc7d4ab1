"""A small fake OpenAI-compatible completions server for the live-driver tests (loopback, no engine).

Minimal HTTP/1.1 on ``asyncio.start_server`` (one request per connection, ``Connection: close``):

- ``POST /v1/completions`` (streaming SSE): token-id prompts (``list[int]``) or text (whitespace-separated words,
  one "token" per word); waits ``ttft_s + prefill_s_per_token * uncached tokens``, then streams the output one
  token per chunk every ``token_delay_s + decode_s_per_seq * in-flight requests`` seconds. Output length is
  ``max_tokens`` when ``ignore_eos`` is set, else ``max(min(natural_len, max_tokens), min_tokens)``. Returns
  ``token_ids`` per chunk when asked (``return_token_ids``) and a usage chunk when ``stream_options.include_usage``.
- prefix cache by longest common prefix: each request's ``lcp`` is its longest common prefix with any earlier
  request's full context (prompt + generated tokens); the hit / query counters are exposed on ``/metrics``;
- ``/v1/models``, ``/version``, ``/metrics`` (vLLM metric names, ``vllm:cache_config_info``);
- failure injection: :meth:`FakeServer.inject` ``"503"`` (HTTP 503), ``"400"`` (HTTP 400), ``"drop"`` (one
  token, then the connection is aborted) for the next ``count`` completion requests matching ``where``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Seen:
    """A completion request as the server saw it (times: seconds on the server's monotonic clock)."""

    body: dict[str, Any]
    tokens: list[Any]
    lcp: int
    t_arrive: float
    output: list[Any] = field(default_factory=list)
    t_first: float | None = None
    t_done: float | None = None
    failed: str | None = None

    @property
    def probe(self) -> bool:
        return self.body.get("max_tokens") == 2 and len(self.tokens) == 8


class FakeServer:
    def __init__(
        self,
        *,
        ttft_s: float = 0.002,
        token_delay_s: float = 0.0005,
        prefill_s_per_token: float = 0.0,
        decode_s_per_seq: float = 0.0,
        accept_ids: bool = True,
        return_ids: bool = True,
        natural_len: int | None = None,
        model: str = "fake/Fake-Model-1B",
        max_model_len: int = 1 << 20,
        metrics: bool = True,
        per_request_metrics: bool = False,
        bunched: bool = False,
    ) -> None:
        self.ttft_s, self.token_delay_s = ttft_s, token_delay_s
        self.prefill_s_per_token, self.decode_s_per_seq = prefill_s_per_token, decode_s_per_seq
        self.accept_ids, self.return_ids, self.natural_len = accept_ids, return_ids, natural_len
        self.model, self.max_model_len, self.metrics = model, max_model_len, metrics
        #: vLLM's ``--enable-per-request-metrics``: ``metrics`` (queue, TTFT, decode interval in ms, on the
        #: server's clock) on the final usage chunk
        self.per_request_metrics = per_request_metrics
        #: deliver every token chunk in one burst after the last token (vLLM's CPU build when its API server is
        #: starved of a core), so the client's chunk times say nothing about step times
        self.bunched = bunched
        self.seen: list[Seen] = []
        self.in_flight = self.max_in_flight = 0
        self.queries = self.hits = self.preemptions = 0
        self._faults: list[list[Any]] = []  # [kind, remaining, predicate]
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    # --------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> FakeServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 1.0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def inject(self, kind: str, *, count: int = 1, where: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self._faults.append([kind, count, where or (lambda body: True)])

    @property
    def turns(self) -> list[Seen]:
        """Completion requests that were not the driver's probe and did not fail."""
        return [s for s in self.seen if not s.probe and s.failed is None]

    # --------------------------------------------------------------------------- HTTP

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "GET" and path == "/v1/models":
                await self._json(
                    writer,
                    200,
                    {
                        "object": "list",
                        "data": [{"id": self.model, "object": "model", "max_model_len": self.max_model_len}],
                    },
                )
            elif method == "GET" and path == "/version":
                await self._json(writer, 200, {"version": "0.0.0-fake"})
            elif method == "GET" and path == "/metrics" and self.metrics:
                await self._send(writer, 200, self.metrics_text().encode(), "text/plain; version=0.0.4")
            elif method == "POST" and path == "/v1/completions":
                await self._complete(writer, json.loads(body))
            else:
                await self._json(writer, 404, {"error": {"message": f"no route {method} {path}"}})
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await writer.wait_closed()

    async def _send(self, writer: asyncio.StreamWriter, status: int, data: bytes, ctype: str) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _json(self, writer: asyncio.StreamWriter, status: int, obj: object) -> None:
        await self._send(writer, status, json.dumps(obj).encode(), "application/json")

    def _fault(self, body: dict[str, Any]) -> str | None:
        for f in self._faults:
            if f[1] > 0 and f[2](body):
                f[1] -= 1
                return f[0]
        return None

    # --------------------------------------------------------------------------- completions

    async def _complete(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and not self.accept_ids:
            await self._json(writer, 400, {"error": {"message": "prompt must be a string"}})
            return
        tokens = list(prompt) if isinstance(prompt, list) else str(prompt).split()
        lcp = self._lcp(tokens)
        seen = Seen(body, tokens, lcp, time.monotonic())
        self.seen.append(seen)
        fault = self._fault(body)
        if fault in ("503", "400"):
            seen.failed = fault
            await self._json(writer, int(fault), {"error": {"message": f"injected {fault}"}})
            return
        self.queries += len(tokens)
        self.hits += lcp
        max_tokens = int(body.get("max_tokens", 16))
        n_out = max_tokens
        if not body.get("ignore_eos") and self.natural_len is not None:
            n_out = max(min(self.natural_len, max_tokens), int(body.get("min_tokens") or 0))
        ids = [5000 + (len(self.seen) * 37 + k * 11) % 20000 for k in range(n_out)]
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            t_sched = time.monotonic()
            await asyncio.sleep(self.ttft_s + self.prefill_s_per_token * (len(tokens) - lcp))
            t_first = t_last = time.monotonic()
            held: list[object] = []
            for k, tid in enumerate(ids):
                if k:
                    await asyncio.sleep(self.token_delay_s + self.decode_s_per_seq * self.in_flight)
                choice: dict[str, Any] = {
                    "index": 0,
                    "text": f" w{tid}",
                    "finish_reason": "length" if k == n_out - 1 else None,
                }
                if body.get("return_token_ids") and self.return_ids:
                    choice["token_ids"] = [tid]
                t_last = time.monotonic()
                event = {"id": "cmpl-fake", "object": "text_completion", "choices": [choice]}
                if self.bunched:
                    held.append(event)
                    seen.output.append(tid if isinstance(prompt, list) else f"w{tid}")
                    continue
                self._event(writer, event)
                seen.output.append(tid if isinstance(prompt, list) else f"w{tid}")
                seen.t_first = seen.t_first or time.monotonic()
                await writer.drain()
                if fault == "drop":
                    seen.failed = "drop"
                    writer.transport.abort()
                    return
            if held:  # the burst: every chunk at once, after the last step
                for event in held:
                    self._event(writer, event)
                seen.t_first = time.monotonic()
            if (body.get("stream_options") or {}).get("include_usage"):
                self._event(writer, self._usage_event(len(tokens), n_out, t_sched, t_first, t_last))
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
            seen.t_done = time.monotonic()
        finally:
            self.in_flight -= 1

    def _lcp(self, tokens: list[Any]) -> int:
        """Longest common prefix of ``tokens`` with the full context (prompt + output) of any earlier request
        that did not fail."""
        lcp = 0
        for s in self.seen:
            if s.failed is not None:
                continue
            ctx = s.tokens + s.output
            n = min(len(ctx), len(tokens))
            k = 0
            while k < n and ctx[k] == tokens[k]:
                k += 1
            lcp = max(lcp, k)
        return lcp

    def _usage_event(self, n_in: int, n_out: int, t_sched: float, t_first: float, t_last: float) -> dict[str, Any]:
        """The final usage chunk (``stream_options.include_usage``), with vLLM's per-request ``metrics`` when
        enabled (times in seconds on the server's monotonic clock, reported in ms)."""
        final: dict[str, Any] = {
            "id": "cmpl-fake",
            "choices": [],
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
        }
        if self.per_request_metrics:
            final["metrics"] = {
                "queue_time_ms": 0.0,
                "time_to_first_token_ms": (t_first - t_sched) * 1e3,
                "generation_time_ms": (t_last - t_first) * 1e3,
            }
        return final

    @staticmethod
    def _event(writer: asyncio.StreamWriter, obj: object) -> None:
        writer.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def metrics_text(self) -> str:
        lab = f'engine="0",model_name="{self.model}"'
        return "\n".join(
            [
                "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
                "# TYPE vllm:prefix_cache_queries_total counter",
                f"vllm:prefix_cache_queries_total{{{lab}}} {float(self.queries)}",
                "# TYPE vllm:prefix_cache_hits_total counter",
                f"vllm:prefix_cache_hits_total{{{lab}}} {float(self.hits)}",
                "# TYPE vllm:num_preemptions_total counter",
                f"vllm:num_preemptions_total{{{lab}}} {float(self.preemptions)}",
                "# TYPE vllm:kv_cache_usage_perc gauge",
                f"vllm:kv_cache_usage_perc{{{lab}}} {min(1.0, self.in_flight / 10)}",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{{{lab}}} {float(self.in_flight)}",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{{{lab}}} 0.0",
                "# TYPE vllm:cache_config_info gauge",
                f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
                f'gpu_memory_utilization="0.9",num_gpu_blocks="4096",num_cpu_blocks="None",{lab}}} 1.0',
                "",
            ]
        )


class ThreadedFakeServer:
    """A :class:`FakeServer` on its own event loop in a thread, for code that calls ``asyncio.run`` (the CLI)."""

    def __init__(self, **kw: Any) -> None:
        self.server = FakeServer(**kw)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.__aenter__(), self._loop).result(5)
        return self.server

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.__aexit__(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
