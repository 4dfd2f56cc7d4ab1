"""What the driver and the profiler share: options, request bodies, endpoint discovery and metrics polling.

Discovery (before any timed request): ``GET /v1/models`` (the endpoint must answer, else
:class:`~collectors.live.client.EndpointUnavailable` names the URL), the served model and its ``max_model_len``,
``GET /version``, then one small probe completion that decides the prompt format (``auto``: token ids if the
server accepts them, else text), and whether the server returns generated token ids, reports usage in the stream
and honours the forced output length.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from collectors.live.client import CompletionClient, DriveError, EndpointRejected, StreamResult
from collectors.live.metrics_scrape import EngineSnapshot, snapshot
from collectors.live.prompts import DEFAULT_VOCAB_SIZE, id_range, render_text

PromptFormat = Literal["auto", "ids", "text"]
PROBE_OUTPUT_TOKENS = 2


@dataclass(frozen=True, slots=True)
class DriveOptions:
    """Request and run options of a live run (all recorded in the cell's ``config_json``)."""

    model: str | None = None  #: served model name; None = the first of ``/v1/models``
    prompt_format: PromptFormat = "auto"  #: token-id prompts, text prompts, or probe
    token_scale: float = 1.0  #: multiply every token count by this (rounded; output >= 1)
    timeout_s: float = 600.0  #: per request, whole stream included, seconds
    max_retries: int = 3  #: retries per request on connection errors / 5xx / timeout
    backoff_s: float = 0.5  #: first retry delay, doubled each retry, seconds
    ignore_eos: bool = True  #: send vLLM's ``ignore_eos`` so generation runs to ``max_tokens``
    min_tokens: bool = True  #: send vLLM's ``min_tokens = max_tokens``
    return_token_ids: bool = True  #: ask for generated ids (vLLM ``return_token_ids``) to extend the context
    temperature: float = 0.0  #: sampling temperature
    vocab_size: int = DEFAULT_VOCAB_SIZE  #: ids are drawn from [1000, vocab_size - 1000)
    seed: int = 0  #: arrivals (poisson), tool model and prompt ids
    metrics_interval_s: float = 1.0  #: poll ``/metrics`` this often during the run (0: before/after only)
    gpu: str | None = None  #: GPU name for the cell (an endpoint does not say which GPU it runs on)
    tp: int | None = None  #: tensor-parallel degree for the cell, when known
    workload_label: str | None = None  #: workload name for the cell (e.g. the trace folder name)

    def __post_init__(self) -> None:
        for name, ok, allowed in (
            ("prompt_format", self.prompt_format in ("auto", "ids", "text"), "auto, ids or text"),
            ("token_scale", self.token_scale > 0, "> 0"),
            ("timeout_s", self.timeout_s > 0, "> 0"),
            ("max_retries", self.max_retries >= 0, ">= 0"),
            ("backoff_s", self.backoff_s >= 0, ">= 0"),
            ("vocab_size", self.vocab_size > 2048, "> 2048"),
            ("metrics_interval_s", self.metrics_interval_s >= 0, ">= 0"),
        ):
            if not ok:
                raise ValueError(f"drive option {name} = {getattr(self, name)!r} is invalid: {allowed}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class EndpointInfo:
    """What discovery found (recorded in the cell)."""

    endpoint: str
    model: str
    prompt_format: Literal["ids", "text"]
    max_model_len: int | None = None
    version: str | None = None
    returns_token_ids: bool = False
    usage_in_stream: bool = False
    forced_length_ok: bool | None = None  #: the probe got exactly the tokens it asked for
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def payload(model: str, ids: list[int], max_tokens: int, fmt: str, opts: DriveOptions) -> dict[str, Any]:
    """The completions request body for prompt ``ids`` (rendered as words in text mode)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(ids) if fmt == "ids" else render_text(ids),
        "max_tokens": int(max_tokens),
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": opts.temperature,
    }
    if opts.ignore_eos:
        body["ignore_eos"] = True
    if opts.min_tokens:
        body["min_tokens"] = int(max_tokens)
    if opts.return_token_ids and fmt == "ids":
        body["return_token_ids"] = True
    return body


async def discover(client: CompletionClient, opts: DriveOptions) -> EndpointInfo:
    """Find the model and the prompt format (see the module docstring); raises :class:`DriveError` clearly."""
    models = await client.models()
    model = opts.model or (str(models[0].get("id")) if models and models[0].get("id") else None)
    if model is None:
        raise DriveError(f"{client.endpoint}/v1/models lists no model; pass --model")
    entry = next((m for m in models if m.get("id") == model), {})
    max_len = entry.get("max_model_len")
    info = EndpointInfo(
        client.endpoint, model, "ids", max_model_len=int(max_len) if max_len else None, version=await client.version()
    )
    lo, _ = id_range(opts.vocab_size)
    ids = [lo + 101 + i for i in range(8)]
    formats = ["ids", "text"] if opts.prompt_format == "auto" else [opts.prompt_format]
    rejected: list[tuple[str, EndpointRejected]] = []
    res: StreamResult | None = None
    for fmt in formats:
        try:
            res = await client.complete(payload(model, ids, PROBE_OUTPUT_TOKENS, fmt, opts))
        except EndpointRejected as exc:
            rejected.append((fmt, exc))
            continue
        info.prompt_format = fmt  # type: ignore[assignment]
        break
    if res is None:
        if len(rejected) == 1:
            raise rejected[0][1]
        raise DriveError(
            f"{client.url} rejected both prompt formats: "
            + "; ".join(f"{f}: HTTP {e.status}: {e.body[:200]}" for f, e in rejected)
        )
    if rejected:
        info.notes.append(
            f"token-id prompts rejected (HTTP {rejected[0][1].status}); using text prompts, whose "
            "token counts are approximate (server-reported prompt_tokens are recorded)"
        )
    info.returns_token_ids = res.output_ids is not None
    info.usage_in_stream = res.completion_tokens is not None
    got = res.completion_tokens if res.completion_tokens is not None else res.stream_tokens
    info.forced_length_ok = got == PROBE_OUTPUT_TOKENS
    if not info.forced_length_ok:
        info.notes.append(
            f"probe asked for {PROBE_OUTPUT_TOKENS} tokens and got {got}: output lengths may not "
            "match the trace (does the server support ignore_eos / min_tokens?)"
        )
    if info.prompt_format == "ids" and not info.returns_token_ids:
        info.notes.append(
            "server does not return generated token ids: next-turn contexts use placeholder ids "
            "for the previous output, so the engine can reuse only the previous prompt"
        )
    return info


class MetricsPoller:
    """``/metrics`` snapshots: :meth:`scrape` on demand, :meth:`run` every ``interval_s`` into ``samples``."""

    def __init__(self, client: CompletionClient, interval_s: float) -> None:
        self.client = client
        self.interval_s = interval_s
        self.samples: list[EngineSnapshot] = []

    async def scrape(self) -> EngineSnapshot | None:
        text = await self.client.metrics_text()
        return None if text is None else snapshot(text, self.client.clock())

    async def run(self) -> None:
        if self.interval_s <= 0:
            return
        while True:
            await asyncio.sleep(self.interval_s)
            with contextlib.suppress(Exception):  # a failed scrape must never stop the run
                s = await self.scrape()
                if s is not None:
                    self.samples.append(s)
