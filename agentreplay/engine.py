"""The discrete-event engine: one simulated clock and one event heap (SimPy-style, STYLE.md).

Events are kept as ``(time_s, phase, seq, event)``. ``phase`` orders simultaneous events: engine outputs
first, then releases/arrivals, then scheduling decisions, so a scheduler running at time t sees every
request that arrived at t. ``seq`` is a per-engine counter: ties are resolved in scheduling order, never by
object identity. Nothing here reads the host clock.

Cancellation is the one mechanism for an event that became stale (a truncated decode run's completion, a pin
released before its TTL, a link completion superseded by a new transfer): :meth:`Engine.at` returns the
:class:`Event`, :meth:`Event.cancel` marks it, and the engine skips its handler when it is popped. Cancelled
events stay in the heap until popped (lazy deletion: O(1) cancel) and are counted in ``events_processed`` like
any other: the count is the number of events scheduled and due, which the summary reports.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, Final

#: An engine iteration (or a batch of fast-forwarded decode iterations) completes.
PHASE_COMPLETE: Final = 0
#: A turn is released to the cluster (program arrival or end of a tool gap).
PHASE_RELEASE: Final = 1
#: An idle instance runs its scheduler.
PHASE_SCHEDULE: Final = 2


class Event:
    """A scheduled ``handler(arg)``; :meth:`cancel` makes the engine skip it."""

    __slots__ = ("arg", "cancelled", "handler", "time_s")

    def __init__(self, time_s: float, handler: Callable[[Any], None], arg: Any) -> None:
        self.time_s = time_s
        self.handler = handler
        self.arg = arg
        self.cancelled = False

    def cancel(self) -> None:
        """The event will not run (cancelling twice, or an event already run, is harmless)."""
        self.cancelled = True


class Engine:
    """Owns ``now`` and the heap; ``run()`` pops events in (time, phase, seq) order until none are left."""

    __slots__ = ("_heap", "_seq", "events_processed", "now")

    def __init__(self) -> None:
        self.now: float = 0.0
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = 0
        self.events_processed = 0

    def at(self, time_s: float, phase: int, handler: Callable[[Any], None], arg: Any = None) -> Event:
        """Schedule ``handler(arg)`` at ``time_s`` (never in the past); returns the event (to cancel it)."""
        if time_s < self.now:
            raise ValueError(f"event scheduled in the past: {time_s} < now {self.now}")
        self._seq += 1
        ev = Event(time_s, handler, arg)
        heapq.heappush(self._heap, (time_s, phase, self._seq, ev))
        return ev

    def nothing_else_now(self) -> bool:
        """True when no other event is due at ``now``: an event scheduled now would be the next one popped, so
        its handler may as well run at once (same order, one heap push and pop fewer)."""
        return not self._heap or self._heap[0][0] > self.now

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def run(self, until_s: float | None = None) -> None:
        heap = self._heap
        pop = heapq.heappop
        while heap:
            if until_s is not None and heap[0][0] > until_s:
                break
            time_s, _, _, ev = pop(heap)
            self.now = time_s
            self.events_processed += 1
            if not ev.cancelled:
                ev.handler(ev.arg)
