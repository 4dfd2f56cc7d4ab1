"""The discrete-event engine: one simulated clock and one event heap (SimPy-style, STYLE.md).

Events are ordered by ``(time_s, phase, seq)``. ``phase`` orders simultaneous events: engine outputs first,
then releases/arrivals, then scheduling decisions, so a scheduler running at time t sees every request that
arrived at t. ``seq`` is a per-engine counter: ties are resolved in scheduling order, never by object identity.
Nothing here reads the host clock.

The heaps hold the :class:`Event` objects themselves, ordered by ``(time_s, key)`` with ``key = phase * 2**48 +
seq`` (the same order as ``(time_s, phase, seq)`` while seq < 2**48); push and pop are :mod:`heapq`'s algorithms
written out here so that, compiled, a comparison reads two doubles and two ints instead of comparing tuples of
Python objects (tests/test_engine.py checks the order against ``heapq`` on tuples).

Cancellation is the one mechanism for an event that became stale (a truncated decode run's completion, a pin
released before its TTL, a link completion superseded by a new transfer): :meth:`Engine.at` returns the
:class:`Event`, :meth:`Event.cancel` marks it, and the engine skips its handler when it is popped. Cancelled
events stay in the heap until popped (lazy deletion: O(1) cancel) and are counted in ``events_processed`` like
any other: the count is the number of events scheduled and due, which the summary reports.
"""

from __future__ import annotations

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

    __slots__ = ("arg", "cancelled", "handler", "key", "time_s")

    def __init__(self, time_s: float, handler: Callable[[Any], None], arg: Any, key: int = 0) -> None:
        self.time_s = time_s
        self.handler = handler
        self.arg = arg
        self.cancelled = False
        self.key = key  #: phase * 2**48 + seq: the order among events at the same time

    def cancel(self) -> None:
        """The event will not run (cancelling twice, or an event already run, is harmless)."""
        self.cancelled = True


_SEQ_BITS: Final = 48  #: seq below 2**48 (about 2.8e14 events) keeps key order = (phase, seq) order


def _before(a: Event, b: Event) -> bool:
    """``a`` is due before ``b``: (time_s, key) order."""
    return a.time_s < b.time_s or (a.time_s == b.time_s and a.key < b.key)


def _sift_up(heap: list[Event], pos: int, ev: Event) -> None:
    """Put ``ev`` at ``pos`` or above it, moving later parents down (heapq's ``_siftdown``)."""
    while pos > 0:
        parent_pos = (pos - 1) >> 1
        parent = heap[parent_pos]
        if not _before(ev, parent):
            break
        heap[pos] = parent
        pos = parent_pos
    heap[pos] = ev


def heap_push(heap: list[Event], ev: Event) -> None:
    """``heapq.heappush`` with :func:`_before` as the order."""
    heap.append(ev)
    _sift_up(heap, len(heap) - 1, ev)


def heap_pop(heap: list[Event]) -> Event:
    """``heapq.heappop`` (its ``_siftup``: down to a leaf along the earlier children, then up) with
    :func:`_before` as the order."""
    last = heap.pop()
    if not heap:
        return last
    top = heap[0]
    end = len(heap)
    pos = 0
    child = 1
    while child < end:
        right = child + 1
        if right < end and not _before(heap[child], heap[right]):
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    _sift_up(heap, pos, last)
    return top


class Engine:
    """Owns ``now`` and the heaps; ``run()`` pops events in (time, phase, seq) order until none are left.

    Releases (:data:`PHASE_RELEASE`: program arrivals and tool-gap ends, one pending per program in flight) and
    the instances' events (completions and scheduling, a few per instance) are kept in two heaps, and ``run()``
    takes the earlier of the two tops: the same order as one heap, while the frequent instance events sift
    through a heap of tens of events instead of thousands."""

    __slots__ = ("_heap", "_releases", "_seq", "events_processed", "now")

    def __init__(self) -> None:
        self.now: float = 0.0
        self._heap: list[Event] = []  #: completions and scheduling events
        self._releases: list[Event] = []  #: PHASE_RELEASE events
        self._seq = 0
        self.events_processed = 0

    def at(self, time_s: float, phase: int, handler: Callable[[Any], None], arg: Any = None) -> Event:
        """Schedule ``handler(arg)`` at ``time_s`` (never in the past); returns the event (to cancel it)."""
        if time_s < self.now:
            raise ValueError(f"event scheduled in the past: {time_s} < now {self.now}")
        self._seq += 1
        if self._seq >> _SEQ_BITS:
            raise OverflowError(f"more than 2**{_SEQ_BITS} events scheduled")
        ev = Event(time_s, handler, arg, (phase << _SEQ_BITS) + self._seq)
        heap_push(self._releases if phase == PHASE_RELEASE else self._heap, ev)
        return ev

    def _next_heap(self) -> list[Event] | None:
        """The heap whose top is the next event due, or None when both are empty."""
        heap, rel = self._heap, self._releases
        if not heap:
            return rel if rel else None
        if rel and _before(rel[0], heap[0]):
            return rel
        return heap

    def nothing_else_now(self) -> bool:
        """True when no other event is due at ``now``: an event scheduled now would be the next one popped, so
        its handler may as well run at once (same order, one heap push and pop fewer)."""
        heap, rel, now = self._heap, self._releases, self.now
        return (not heap or heap[0].time_s > now) and (not rel or rel[0].time_s > now)

    def peek_time(self) -> float | None:
        h = self._next_heap()
        return h[0].time_s if h is not None else None

    def run(self, until_s: float | None = None) -> None:
        while True:
            h = self._next_heap()
            if h is None or (until_s is not None and h[0].time_s > until_s):
                break
            ev = heap_pop(h)
            self.now = ev.time_s
            self.events_processed += 1
            if not ev.cancelled:
                ev.handler(ev.arg)
