"""Live driver: replay a trace's programs against a real OpenAI-compatible completions endpoint.

Semantics match the simulator's orchestrator (agentreplay.sim.orchestrator) so a measured run and a simulated run
of the same cell are comparable:

- A program releases turn 0 when it arrives and turn t+1 only after turn t's last token *and* its tool gap, the
  gap coming from the simulator's own tool model (:func:`agentreplay.sim.tools.make_tools`: replay / fixed /
  scale) and slept on the driver's clock.
- Arrivals: ``closed`` (``concurrency`` programs in flight; the next starts when one finishes), ``poisson``
  (exponential inter-arrivals at ``rate_per_s`` from ``SeedSequence(seed).spawn(2)[0]``, the simulator's
  arrival generator, first program at 0), ``trace`` (``arrival_s`` shifted so the first is at 0).
- Prompts: exact token counts and the trace's prefix structure (:mod:`collectors.live.prompts`); output length
  forced with ``max_tokens = min_tokens = output_tokens`` and ``ignore_eos``.

Clock: ``time.monotonic`` seconds from the run start. Per turn: release (the turn became ready), send (the
successful attempt left), first token, last token, as :class:`~collectors.live.client.StreamResult` defines them.
JCT = last token of the program's last turn - the program's arrival (its turn-0 release).

Interruption: on cancellation (Ctrl-C under ``asyncio.run``) or a request that fails for good (4xx, or retries
exhausted) nothing more is released, in-flight requests are cancelled, every finished turn and program is written
with ``partial: true`` in the cell's ``config_json`` (and the error, if any), then the exception propagates.
Files are written atomically (:func:`collectors.live.output.write_run`): never half a dataset.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from agentreplay.sim.config import ToolConfig, WorkloadConfig
from agentreplay.sim.tools import make_tools
from agentreplay.sim.workload import Workload, compile_trace
from agentreplay.trace.io import Trace
from collectors.live.client import CompletionClient, DriveError, monotonic_clock
from collectors.live.endpoint import DriveOptions, EndpointInfo, MetricsPoller, discover, payload
from collectors.live.metrics_scrape import EngineSnapshot
from collectors.live.output import RunFacts, TurnRecord, build_tables, write_run
from collectors.live.prompts import PromptBuilder, scale_workload

Progress = Callable[[int, int], None]
T = TypeVar("T")


@dataclass(slots=True)
class DriveResult:
    """A finished (or partial) live run: the measured tables written, the per-turn sidecar and the paths."""

    tables: dict[str, pd.DataFrame]
    turns: pd.DataFrame
    paths: dict[str, Path]
    partial: bool
    info: EndpointInfo


def prepare_workload(trace: Trace | Workload, cfg: WorkloadConfig, token_scale: float) -> Workload:
    """The programs to drive: ``max_programs`` first, then token scaling."""
    w = trace if isinstance(trace, Workload) else compile_trace(trace)
    if cfg.max_programs is not None:
        w = w.head(cfg.max_programs)
    return scale_workload(w, token_scale)


def check_fits(w: Workload, max_model_len: int | None) -> None:
    """Fail before the run when a turn's prompt + output exceeds the server's ``max_model_len``."""
    if not max_model_len:
        return
    need = w.input_tokens + w.output_tokens
    if (need > max_model_len).any():
        i = int(np.argmax(need > max_model_len))
        p = int(np.searchsorted(w.turn_start, i, side="right") - 1)
        raise DriveError(
            f"program {w.program_ids[p]!r} turn {i - int(w.turn_start[p])} needs {int(need[i])} "
            f"tokens (input {int(w.input_tokens[i])} + output {int(w.output_tokens[i])}) but the "
            f"server's max_model_len is {max_model_len}; use --token-scale or --max-programs"
        )


class _Run:
    def __init__(
        self,
        client: CompletionClient,
        w: Workload,
        cfg: WorkloadConfig,
        tools: ToolConfig,
        opts: DriveOptions,
        info: EndpointInfo,
        progress: Progress | None,
    ) -> None:
        self.client, self.w, self.cfg, self.opts, self.info = client, w, cfg, opts, info
        self.clock = client.clock
        self.tools = make_tools(tools, w)
        seeds = np.random.SeedSequence(opts.seed).spawn(2)
        self.rng_arrivals, self.rng_tools = (np.random.default_rng(s) for s in seeds)
        self.prompts = PromptBuilder(w, seed=opts.seed, vocab_size=opts.vocab_size)
        self.progress = progress
        self.records: list[TurnRecord] = []
        self.arrival_s: dict[int, float] = {}
        self.finish_s: dict[int, float] = {}
        self._next = 0
        self.arrivals = self.schedule() if cfg.arrival != "closed" else []

    async def _sleep_until(self, t_s: float) -> None:
        delay = t_s - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)

    async def program(self, p: int) -> None:
        w = self.w
        state = self.prompts.program(p)
        start, n = int(w.turn_start[p]), w.n_turns_of(p)
        planned = self.clock()
        gap_prev, last_token = math.nan, planned
        for t in range(n):
            g = start + t
            await self._sleep_until(planned)
            release = self.clock()
            if t == 0:
                self.arrival_s[p] = release  # JCT counts from the program's first release
            ids, kept = state.next_prompt(int(w.input_tokens[g]), int(w.reused_tokens[g]))
            out_n = int(w.output_tokens[g])
            res = await self.client.complete(payload(self.info.model, ids, out_n, self.info.prompt_format, self.opts))
            if res.output_ids is not None and self.info.prompt_format == "ids":
                out_ids, src = res.output_ids, "server"
            else:
                out_ids, src = state.placeholder_output(out_n), "placeholder"
            state.add_output(ids, out_ids)
            gap = self.tools.gap_s(g, self.rng_tools) if t < n - 1 else math.nan
            self.records.append(
                TurnRecord(
                    program=p,
                    turn_idx=t,
                    planned_release_s=planned,
                    release_s=release,
                    result=res,
                    input_tokens=int(w.input_tokens[g]),
                    prompt_ids_sent=len(ids),
                    reused_tokens=int(w.reused_tokens[g]),
                    kept_tokens=kept,
                    output_tokens=out_n,
                    output_ids_source=src,
                    tool_gap_s=gap,
                    gap_before_s=gap_prev,
                )
            )
            planned, gap_prev, last_token = res.last_token_s + (0.0 if math.isnan(gap) else gap), gap, res.last_token_s
        self.finish_s[p] = last_token
        if self.progress is not None:
            self.progress(len(self.finish_s), w.n_programs)

    async def _closed_worker(self) -> None:
        while self._next < self.w.n_programs:
            p = self._next
            self._next += 1
            await self.program(p)

    def schedule(self) -> list[tuple[float, int]]:
        """``(arrival s, program)`` for open-loop modes, sorted; the same times the simulator uses."""
        n = self.w.n_programs
        if self.cfg.arrival == "poisson":
            gaps = self.rng_arrivals.exponential(1.0 / self.cfg.rate_per_s, size=n)
            times = np.cumsum(gaps) - gaps[0]
            return [(float(times[p]), p) for p in range(n)]
        arr = self.w.arrival_s
        if np.isnan(arr).any():
            p = int(np.argmax(np.isnan(arr)))
            raise DriveError(f"arrival 'trace': program {self.w.program_ids[p]!r} has no arrival_s")
        arr = arr - arr.min()
        return [(float(arr[p]), int(p)) for p in np.argsort(arr, kind="stable")]

    async def run(self) -> None:
        """Drive every program; the first failing program cancels the rest and its exception propagates."""
        tasks: set[asyncio.Task[None]] = set()
        try:
            if self.cfg.arrival == "closed":
                tasks = {
                    asyncio.create_task(self._closed_worker())
                    for _ in range(min(self.cfg.concurrency, self.w.n_programs))
                }
            else:
                t0 = self.clock()
                for t_s, p in self.arrivals:
                    await self._wait_or_fail(tasks, t0 + t_s)
                    tasks.add(asyncio.create_task(self.program(p)))
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                self._raise_failed(done)
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _wait_or_fail(self, tasks: set[asyncio.Task[None]], until_s: float) -> None:
        """Sleep until ``until_s`` (driver clock), raising at once if a running program fails meanwhile."""
        while (delay := until_s - self.clock()) > 0:
            pending = {t for t in tasks if not t.done()}
            if not pending:
                await asyncio.sleep(delay)
                return
            done, _ = await asyncio.wait(pending, timeout=delay, return_when=asyncio.FIRST_EXCEPTION)
            self._raise_failed(done)
        self._raise_failed(tasks)

    @staticmethod
    def _raise_failed(tasks: set[asyncio.Task[None]]) -> None:
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]


async def drive_async(
    endpoint: str,
    trace: Trace | Workload,
    cfg: WorkloadConfig | None,
    out_dir: str | os.PathLike[str],
    *,
    tools: ToolConfig | None = None,
    options: DriveOptions | None = None,
    progress: Progress | None = None,
) -> DriveResult:
    """Replay ``trace`` against ``endpoint`` and write the measured dataset to ``out_dir``; see the module doc.

    Raises :class:`DriveError` (nothing written) when the endpoint is unreachable or rejects the probe, or when
    a turn cannot fit the server's context; after the run started, a failure or cancellation writes a partial
    dataset first and then propagates.
    """
    cfg, tools, opts = cfg or WorkloadConfig(), tools or ToolConfig(), options or DriveOptions()
    w = prepare_workload(trace, cfg, opts.token_scale)
    make_tools(tools, w)  # fail on missing tool durations before touching the endpoint
    clock = monotonic_clock()
    async with CompletionClient(
        endpoint, clock, timeout_s=opts.timeout_s, max_retries=opts.max_retries, backoff_s=opts.backoff_s
    ) as client:
        info = await discover(client, opts)
        check_fits(w, info.max_model_len)
        poller = MetricsPoller(client, opts.metrics_interval_s)
        before = await poller.scrape()
        run = _Run(client, w, cfg, tools, opts, info, progress)
        poll_task = asyncio.create_task(poller.run())
        t_start = clock()
        error: BaseException | None = None
        try:
            await run.run()
        except BaseException as exc:  # cancellation, KeyboardInterrupt, DriveError: write what finished first
            error = exc
        finally:
            poll_task.cancel()
            with contextlib.suppress(BaseException):
                await poll_task
        after = await _scrape_quietly(poller)
    facts = RunFacts(
        workload=w,
        cfg=cfg,
        tools=tools,
        opts=opts,
        info=info,
        t_start_s=t_start,
        arrival_s=run.arrival_s,
        finish_s=run.finish_s,
        before=before,
        after=after,
        samples=poller.samples,
        partial=error is not None,
        error=None if error is None else _describe(error),
    )
    tables, turns = build_tables(run.records, facts)
    paths = write_run(out_dir, tables, turns)
    if error is not None:
        with contextlib.suppress(Exception):  # lets the CLI say that a partial dataset was written
            error.partial_paths = paths  # type: ignore[attr-defined]
        raise error
    return DriveResult(tables, turns, paths, False, info)


async def _scrape_quietly(poller: MetricsPoller, timeout_s: float = 5.0) -> EngineSnapshot | None:
    try:
        return await asyncio.wait_for(poller.scrape(), timeout_s)
    except Exception:  # the run's data matters more than the final scrape (also after an interrupt)
        return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"


def run_interruptible(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``. Ctrl-C cancels ``coro`` (which writes its partial dataset) and raises
    KeyboardInterrupt carrying the coroutine's ``partial_paths`` (None when nothing was written)."""
    box: dict[str, object] = {}

    async def main() -> T:
        try:
            return await coro
        except BaseException as exc:
            box["paths"] = getattr(exc, "partial_paths", None)
            raise

    try:
        return asyncio.run(main())
    except KeyboardInterrupt as exc:
        exc.partial_paths = box.get("paths")  # type: ignore[attr-defined]
        raise


def drive(
    endpoint: str, trace: Trace | Workload, cfg: WorkloadConfig | None, out_dir: str | os.PathLike[str], **kw: Any
) -> DriveResult:
    """Synchronous :func:`drive_async`; Ctrl-C writes the partial dataset, then raises KeyboardInterrupt."""
    return run_interruptible(drive_async(endpoint, trace, cfg, out_dir, **kw))
