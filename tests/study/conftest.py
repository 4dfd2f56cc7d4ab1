"""Fixtures for the study tests: the bundled trace (committed in datasets/), a tiny study size, an in-process
executor (no worker processes: the tests stay fast on a loaded 2-core machine)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from agentreplay.sim.workload import Workload, compile_trace
from agentreplay.study.spec import TRACE, StudyOptions
from agentreplay.trace.io import read_trace


class SerialExecutor:
    """:class:`agentreplay.sweep.Executor` that runs each call at submit, in this process."""

    description = "in-process (tests)"
    workers = 1

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        try:
            fut.set_result(fn(*args))
        except Exception as exc:  # the runner reads it through .result(), as from a real pool
            fut.set_exception(exc)
        return fut

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        return iter(list(futures))

    def close(self) -> None:
        pass


@pytest.fixture(scope="session")
def workload() -> Workload:
    return compile_trace(read_trace(TRACE))


@pytest.fixture()
def tiny() -> StudyOptions:
    """Four programs per cell, one seed: every experiment's cells, a fraction of a second each."""
    return StudyOptions(seeds=(1,), programs=4, grid_programs=3, trace=TRACE)
