"""Host memory tiers below HBM and the links that reach them.

- :class:`Link`: a transfer channel (PCIe to host DRAM, CXL, or the network between instances) shared by
  concurrent transfers in equal parts (processor sharing), so concurrent swaps slow each other. Each transfer
  also pays the link's setup latency once. Completion times are recomputed whenever a transfer starts or ends.
- :class:`HostTier`: a byte-capacity store of per-program KV entries (a program's history blocks
  ``[base, base + blocks)``) with LRU eviction, like LMCache's local CPU backend (whole entries here; LMCache
  evicts 256-token chunks).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from agentreplay.engine import PHASE_COMPLETE, Engine, Event


@dataclass(slots=True, eq=False)
class _Transfer:
    remaining_bytes: float
    on_done: Callable[[], None]


class Link:
    """Processor-sharing link of ``gbps`` GB/s (1e9 bytes/s) with a per-transfer latency."""

    def __init__(self, name: str, engine: Engine, gbps: float, latency_s: float) -> None:
        if gbps <= 0:
            raise ValueError(f"link {name}: bandwidth must be > 0 GB/s, got {gbps}")
        self.name = name
        self.engine = engine
        self.bytes_per_s = gbps * 1e9
        self.latency_s = latency_s
        self.active: list[_Transfer] = []
        self.bytes_moved = 0
        self.transfers = 0
        self._last = 0.0
        self._next: Event | None = None  #: the pending completion (cancelled when a transfer starts or ends)

    def start(self, nbytes: int, on_done: Callable[[], None]) -> _Transfer:
        """Begin moving ``nbytes``; ``on_done()`` runs when the last byte arrives. Returns the transfer (for
        :meth:`cancel`)."""
        self._advance()
        self.bytes_moved += nbytes
        self.transfers += 1
        # the setup latency is charged as bytes the transfer would have moved alone in that time
        t = _Transfer(nbytes + self.latency_s * self.bytes_per_s, on_done)
        self.active.append(t)
        self._reschedule()
        return t

    def cancel(self, transfer: _Transfer) -> None:
        """Stop ``transfer`` now (its receiver is gone: a failed instance); ``on_done`` never runs and the others
        share the bandwidth from now on. The bytes it was started with stay counted in ``bytes_moved``."""
        self._advance()
        self.active = [t for t in self.active if t is not transfer]
        self._reschedule()

    def _advance(self) -> None:
        now = self.engine.now
        if self.active:
            share = self.bytes_per_s / len(self.active) * (now - self._last)
            for t in self.active:
                t.remaining_bytes -= share
        self._last = now

    def _reschedule(self) -> None:
        if self._next is not None:
            self._next.cancel()
            self._next = None
        if not self.active:
            return
        first = min(self.active, key=lambda t: t.remaining_bytes)
        dt = max(0.0, first.remaining_bytes) * len(self.active) / self.bytes_per_s
        self._next = self.engine.at(self.engine.now + dt, PHASE_COMPLETE, self._on_event, first)

    def _on_event(self, first: _Transfer) -> None:
        self._next = None
        self._advance()
        # the transfer this event was scheduled for is done whatever float residue is left; others that end
        # at the same moment (within a byte) finish with it
        done = [t for t in self.active if t is first or t.remaining_bytes <= 1.0]
        self.active = [t for t in self.active if not (t is first or t.remaining_bytes <= 1.0)]
        self._reschedule()
        for t in done:
            t.on_done()


class HostTier:
    """LRU store of program KV entries with a capacity in blocks."""

    def __init__(self, name: str, capacity_blocks: int, link: Link) -> None:
        self.name = name
        self.capacity_blocks = capacity_blocks
        self.link = link
        self.entries: OrderedDict[Hashable, int] = OrderedDict()
        self.used_blocks = 0
        self.evicted_blocks = 0

    def get(self, key: Hashable) -> int:
        """Blocks stored for ``key`` (0 if none); refreshes its LRU position."""
        n = self.entries.get(key, 0)
        if n:
            self.entries.move_to_end(key)
        return n

    def put(self, key: Hashable, blocks: int) -> list[tuple[Hashable, int]]:
        """Store ``blocks`` for ``key`` (replacing a shorter entry); returns the LRU entries evicted."""
        if blocks > self.capacity_blocks:
            return []
        old = self.entries.pop(key, 0)
        self.used_blocks -= old
        evicted = []
        while self.used_blocks + blocks > self.capacity_blocks and self.entries:
            k, n = self.entries.popitem(last=False)
            self.used_blocks -= n
            self.evicted_blocks += n
            evicted.append((k, n))
        self.entries[key] = max(blocks, old)
        self.used_blocks += self.entries[key]
        return evicted
