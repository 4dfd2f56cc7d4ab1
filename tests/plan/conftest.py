"""An in-process executor for the plan tests (the sweep runner's protocol, with no process start-up), and the
bundled trace."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

BUNDLED = Path(__file__).resolve().parents[2] / "datasets" / "swebench-verified"


class InlineExecutor:
    """Runs each submitted call at once, in this process; ``calls`` counts them."""

    description = "inline (tests)"

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self.calls = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        self.calls += 1
        fut: Future[Any] = Future()
        try:
            fut.set_result(fn(*args))
        except Exception as exc:  # pragma: no cover - the cell functions return failures as data
            fut.set_exception(exc)
        return fut

    def as_completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        return iter(list(futures))

    def close(self) -> None:
        pass


@pytest.fixture()
def inline() -> InlineExecutor:
    return InlineExecutor()


@pytest.fixture(scope="session")
def bundled() -> Path:
    if not (BUNDLED / "turns.parquet").exists():
        pytest.skip(f"bundled trace missing: {BUNDLED}")
    return BUNDLED
