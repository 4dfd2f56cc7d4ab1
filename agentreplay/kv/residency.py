"""KV residency of one instance beyond the HBM prefix cache: pins, host tiers and transfers.

- **Pins** hold a program's blocks in HBM through a tool gap (TTL policies, InferCept *preserve*): the
  finished call's segment references are kept instead of released. The program's next call on this instance
  hits them; a TTL expiry, or memory pressure (``unpin_on_pressure``), releases them.
- **Offload** (LMCache-style, inclusive): at the end of a call the program's full history blocks are written
  to host DRAM (or CXL) over the instance's link; the HBM blocks stay referenced until the write completes
  (vLLM's KV connector delays freeing until the save is done), then join the HBM LRU as usual. A later call
  whose HBM hit falls short loads the rest from the tier (request state "loading", the blocks allocated at
  admission, compute starts when the load completes; other requests keep running meanwhile).
- **Migration** (session-affinity move with an inter-instance link): the blocks still cached on the old
  instance are loaded over the cluster link the same way.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentreplay.engine import PHASE_RELEASE, Engine, Event
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.kv.tiers import HostTier, Link
from agentreplay.request import Request

GIB = 1 << 30


@dataclass(slots=True, eq=False)
class Pin:
    request: Request
    since_s: float
    expiry: Event | None  #: the TTL expiry (None: pinned until the program's next call), cancelled on unpin


class Residency:
    """Pins, host tiers and loads of one instance (its scheduler calls it; policies decide, this applies)."""

    def __init__(
        self,
        engine: Engine,
        pool: SegmentPool,
        block_bytes: int,
        tiers: list[HostTier],
        remote: Callable[[Request], tuple[SegmentPool, Link] | None] | None = None,
        unpin_on_pressure: bool = True,
    ) -> None:
        self.engine = engine
        self.pool = pool
        self.block_bytes = block_bytes
        self.tiers = tiers
        self.remote = remote
        self.unpin_on_pressure = unpin_on_pressure
        self.pins: OrderedDict[int, Pin] = OrderedDict()  # program -> pin, oldest first
        self.on_ready: Callable[[], None] = lambda: None
        self.on_release: Callable[[Request], None] = lambda r: None  # scheduler.release
        self.writing: dict[int, Request] = {}  # program -> call whose KV is being written to a tier
        self.pinned_block_s = 0.0  # integral of pinned blocks over time (memory held idle)
        self.unpins_on_pressure = 0
        self.log: Callable[[dict[str, Any]], None] | None = None

    # ---- pins ---------------------------------------------------------------------------------------------
    def pin(self, r: Request, ttl_s: float) -> None:
        """Keep ``r``'s blocks (its partial last block is freed) for ``ttl_s`` seconds (inf: until reused)."""
        old = self.pins.get(r.program)
        if old is not None and old.expiry is not None:
            old.expiry.cancel()
        expiry = None
        if math.isfinite(ttl_s):
            expiry = self.engine.at(self.engine.now + ttl_s, PHASE_RELEASE, self._expire, r.program)
        self.pins[r.program] = Pin(r, self.engine.now, expiry)

    def _expire(self, program: int) -> None:
        self.pins[program].expiry = None
        self.unpin(program)
        self.on_ready()

    def unpin(self, program: int) -> None:
        pin = self.pins.pop(program)
        if pin.expiry is not None:
            pin.expiry.cancel()
        blocks = pin.request.prog.present - pin.request.base
        self.pinned_block_s += blocks * (self.engine.now - pin.since_s)
        self.on_release(pin.request)

    def consume_pin(self, r: Request) -> None:
        """``r`` (same program) was admitted and took its own references: drop the pin's."""
        if r.program in self.pins:
            self.unpin(r.program)

    def has_expiring_pins(self) -> bool:
        return any(p.expiry is not None for p in self.pins.values())

    def release_oldest_pin(self, exclude: int, force: bool = False) -> bool:
        """Under memory pressure: release the oldest pin of another program (always when ``force``, else only
        with ``unpin_on_pressure``). False when there is none."""
        if not (self.unpin_on_pressure or force):
            return False
        for program in self.pins:
            if program != exclude:
                self.unpin(program)
                self.unpins_on_pressure += 1
                return True
        return False

    # ---- host tiers --------------------------------------------------------------------------------------
    def offload(self, r: Request, done: Callable[[], None]) -> bool:
        """Write ``r``'s history blocks to the first tier with room; ``done()`` when written. False if no tier."""
        blocks = r.prog.present - r.base
        if blocks <= 0 or not self.tiers:
            return False
        tier = next((t for t in self.tiers if t.capacity_blocks >= blocks), None)
        if tier is None:
            return False

        def written() -> None:
            self.writing.pop(r.program, None)
            for key, n in tier.put(r.program, blocks):
                self._demote(tier, key, n)
            done()

        self.writing[r.program] = r
        tier.link.start(blocks * self.block_bytes, written)
        return True

    def held_segments(self) -> list[Request]:
        """Calls whose segments this residency keeps referenced (pins and writes in flight)."""
        return [p.request for p in self.pins.values()] + list(self.writing.values())

    def _demote(self, tier: HostTier, key: Any, blocks: int) -> None:
        """An entry evicted from DRAM moves down to the next tier if there is one (its link carries it)."""
        i = self.tiers.index(tier)
        if i + 1 < len(self.tiers):
            lower = self.tiers[i + 1]
            lower.link.bytes_moved += blocks * self.block_bytes
            for k, n in lower.put(key, blocks):
                self._demote(lower, k, n)

    def external_hit(self, r: Request, have_blocks: int, bound_blocks: int) -> tuple[str, int, Link | None]:
        """Blocks beyond the HBM hit (absolute block index ``have_blocks``) that a tier or the previous
        instance can supply, up to ``bound_blocks``: ``(source name, blocks, link)``."""
        best: tuple[str, int, Link | None] = ("", 0, None)
        for tier in self.tiers:
            n = min(r.base + tier.get(r.program), bound_blocks) - have_blocks
            if n > best[1]:
                best = (tier.name, n, tier.link)
        if r.migrate_from >= 0 and self.remote is not None:
            got = self.remote(r)
            if got is not None:
                pool, link = got
                seg = pool.segments.get(("prog", r.program))
                if seg is not None:
                    n = min(seg.present, bound_blocks) - have_blocks
                    if n > best[1]:
                        best = ("remote", n, link)
        return best

    def load(self, r: Request, source: str, blocks: int, link: Link) -> None:
        """Start loading ``blocks`` for ``r``; when done its computed tokens grow and the instance wakes."""
        r.loading = True
        r.reloaded_tokens[source] = r.reloaded_tokens.get(source, 0) + blocks * self.pool.block_size

        def arrived() -> None:
            r.computed += blocks * self.pool.block_size
            r.loading = False
            self.on_ready()

        link.start(blocks * self.block_bytes, arrived)
