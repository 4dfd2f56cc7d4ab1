"""Where cells run: one small interface, a local process pool (default) and a Dask distributed cluster.

The runner only calls ``submit``, ``as_completed`` and ``close``, so both backends share its code path.

Interruption (Ctrl-C): local workers ignore SIGINT (the terminal sends it to the whole process group), so only
the parent sees it; leaving a ``with`` block on :class:`KeyboardInterrupt` ends the pool at once (queued cells
cancelled, running workers terminated) instead of waiting for the running cells, and no worker prints a
traceback. What the runner wrote before stays (a sweep resumes from it).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed as cf_as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol


class Executor(Protocol):
    """Runs functions that are importable by module path (so every backend can ship them by reference)."""

    description: str  #: shown to the user: "local pool, 8 workers"
    workers: int

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        """Start ``fn(*args)``; returns a future with ``.result()`` (raising what the call raised)."""
        ...

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        """Yield ``futures`` as they finish."""
        ...

    def close(self) -> None:
        """Cancel what has not started and release the workers (never shuts down a shared cluster)."""
        ...


class LocalExecutor:
    """A ``ProcessPoolExecutor`` with ``spawn`` workers (no forked threads or locks from the parent).

    A worker that dies (out of memory, a signal) breaks a process pool for good; the next ``submit`` then starts
    a fresh pool, so the runner's retry gets a working one.
    """

    def __init__(self, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers = {workers} is invalid: >= 1")
        self.workers = workers or os.cpu_count() or 1
        self.description = f"local process pool, {self.workers} worker{'s' if self.workers > 1 else ''}"
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_sigint
        )

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        try:
            return self._pool.submit(fn, *args)
        except BrokenProcessPool:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
            return self._pool.submit(fn, *args)

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        return cf_as_completed(list(futures))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """End the pool now: cancel what has not started, terminate the workers running cells."""
        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.terminate()
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.join(timeout=5)
        # A worker still alive after SIGTERM (a loaded machine, a worker caught mid start-up) gets SIGKILL, which it
        # cannot ignore; the pool is then certainly empty when abort returns.
        for proc in procs:
            with contextlib.suppress(Exception):
                if proc.is_alive():
                    proc.kill()
                    proc.join()

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.abort()
        else:
            self.close()


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it ends the pool), not each worker's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class DaskExecutor:
    """A client of a running ``distributed`` scheduler. Workers need agentreplay importable and the trace
    path readable (a shared filesystem); each worker process keeps its own trace cache."""

    def __init__(self, address: str, *, timeout_s: float = 10.0) -> None:
        from distributed import Client

        self._client = Client(address, timeout=timeout_s, set_as_default=False)
        self.workers = len(self._client.scheduler_info().get("workers", {}))
        self.description = f"dask scheduler {address}, {self.workers} worker{'s' if self.workers != 1 else ''}"

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any:
        # pure=False: a retry of the same arguments must run again, not return the cached failure
        return self._client.submit(fn, *args, pure=False)

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        from distributed import as_completed

        return iter(as_completed(list(futures), loop=self._client.loop))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_executor(workers: int | None = None, scheduler_address: str | None = None) -> LocalExecutor | DaskExecutor:
    """A Dask client when ``scheduler_address`` is given, else a local pool of ``workers`` processes."""
    if scheduler_address:
        return DaskExecutor(scheduler_address)
    return LocalExecutor(workers)
