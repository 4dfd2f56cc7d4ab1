"""Where an experiment's cells run: the sweep's executors (:mod:`agentreplay.sweep.executors`: a local process pool,
or a Dask cluster), or this process when one worker is asked for (no worker to start, nothing to ship; Ctrl-C
stops the cell that runs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from agentreplay.sweep.executors import DaskExecutor, LocalExecutor, make_executor


class Deferred:
    """A call made when its result is first asked for (the in-process executor's future)."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._call: tuple[Callable[..., Any], tuple[Any, ...]] | None = (fn, args)
        self._value: Any = None
        self._error: BaseException | None = None

    def result(self) -> Any:
        if self._call is not None:
            fn, args = self._call
            self._call = None
            try:
                self._value = fn(*args)
            except Exception as exc:  # kept, and raised to every caller of result() (a future's contract)
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._value


class InProcess:
    """The :class:`~agentreplay.sweep.executors.Executor` interface run in this process, one cell at a time, each
    when the runner asks for its result (so progress is reported as cells finish)."""

    workers = 1
    description = "this process (1 worker)"

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Deferred:
        return Deferred(fn, args)

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        return iter(list(futures))

    def close(self) -> None:
        return None

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def executor_for(workers: int | None, dask: str | None) -> LocalExecutor | DaskExecutor | InProcess:
    """A Dask client for ``dask`` (a scheduler address), this process for one worker, else a local process pool
    of ``workers`` (None: one per CPU)."""
    if workers is not None and workers < 1:
        raise ValueError(f"--workers {workers}: must be >= 1")
    if workers == 1 and not dask:
        return InProcess()
    return make_executor(workers, dask)
