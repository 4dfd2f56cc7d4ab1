"""The KV manager of one instance: the seam between the batch scheduler and the KV residency model.

As vLLM v1 splits it (``vllm/v1/core/kv_cache_manager.py``): the scheduler decides *which* requests run and how
many tokens; this class answers the block questions and applies the block operations, over the instance's
:class:`~agentreplay.kv.segment_pool.SegmentPool` (HBM prefix cache), its
:class:`~agentreplay.kv.residency.Residency` (pins, host tiers, transfers) and its tool-gap retention policy
(:mod:`agentreplay.kv.retention`):

- :meth:`get_computed_blocks` (vLLM ``KVCacheManager.get_computed_blocks`` -> ``find_longest_cache_hit``): the
  prompt's leading cached blocks (shared prefix or prefix chain, then the program's history, at most ``prompt -
  1`` tokens), the blocks a host tier or the previous instance could add, and how many hit blocks sit in the free
  queue (they count against the free blocks, ``allocate_slots``' ``num_evictable_computed_blocks``);
- :meth:`can_allocate` (the capacity check of ``KVCacheManager.allocate_slots``; pins of other programs are
  released under pressure first), :meth:`allocate_slots` (touch the hit blocks, allocate the new ones, register
  the shared prefix) and :meth:`allocate` (a running request's new blocks);
- :meth:`free` (``KVCacheManager.free``: blocks back in reverse order, cached ones stay hit-able),
  :meth:`free_partial`, :meth:`release_segments`, :meth:`start_load` (a tier hit: vLLM's KV connector loads
  asynchronously, ``WAITING_FOR_REMOTE_KVS``), and :meth:`retain` (a finished call's KV through the tool gap:
  release, drop, pin or offload, as the retention policy decides).
"""

from __future__ import annotations

from collections.abc import Callable

from agentreplay.kv.residency import Residency
from agentreplay.kv.retention import Decision, GapContext, Retention
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.kv.tiers import Link
from agentreplay.request import Request


def held_blocks(tokens: int, base: int, block_size: int) -> int:
    """Blocks a request holds with ``tokens`` slots allocated: the whole shared prefix plus its own blocks."""
    return max(base, -(-tokens // block_size))


def _seg_end(r: Request, k: int) -> int:
    """End block (exclusive) of ``r.chain[k]``: the next segment's base, or ``r.base`` for the last."""
    return r.chain[k + 1].base if k + 1 < len(r.chain) else r.base


def _seg_hit(r: Request, k: int, hit: int) -> int:
    """Blocks of ``r.chain[k]`` inside a chain hit of ``hit`` blocks from block 0."""
    seg = r.chain[k]
    return max(0, min(hit, _seg_end(r, k)) - seg.base)


def chain_hit(r: Request, max_hit: int) -> int:
    """Leading blocks of ``r``'s prefix chain cached on this instance (absolute, from block 0), at most ``max_hit``.

    vLLM walks the chained block hashes from the first block and stops at the first miss
    (``KVCacheManager.get_computed_blocks`` -> ``find_longest_cache_hit``): a segment counts only if every
    segment before it is cached whole; within a segment the cached blocks are its leading ``present - base``."""
    hit = 0
    chain = r.chain
    for k in range(len(chain)):
        seg = chain[k]
        end = _seg_end(r, k)
        reach = min(seg.present, end, max_hit)
        if reach < end:
            return max(hit, reach)
        hit = end
    return hit


class PrefixHit:
    """What :meth:`KVManager.get_computed_blocks` found for a waiting request (blocks, absolute from block 0)."""

    __slots__ = ("evictable", "ext_blocks", "ext_source", "link", "pfx_hit", "prog_hit")

    def __init__(
        self, pfx_hit: int, prog_hit: int, ext_source: str, ext_blocks: int, link: Link | None, evictable: int
    ) -> None:
        self.pfx_hit = pfx_hit  #: cached blocks of the shared prefix (or prefix chain)
        self.prog_hit = prog_hit  #: cached blocks of the program's history after it
        self.ext_source = ext_source  #: tier name ("dram", "cxl") or "remote" supplying more blocks, or ""
        self.ext_blocks = ext_blocks  #: blocks that source can load beyond the HBM hit
        self.link = link  #: the link they would come over
        self.evictable = evictable  #: hit blocks now in the free queue (allocate_slots' evictable hits)


class KVManager:
    """Block questions and block operations of one instance (see the module docstring)."""

    def __init__(
        self,
        pool: SegmentPool,
        enable_prefix_caching: bool = True,
        residency: Residency | None = None,
        retention: Retention | None = None,
    ) -> None:
        self.pool = pool
        self.bs = pool.block_size
        self.prefix_caching = enable_prefix_caching
        self.residency = residency
        self.retention = retention
        if residency is not None:
            residency.on_release = self.release_segments
        self._hit = PrefixHit(0, 0, "", 0, None, 0)  # filled by get_computed_blocks (one per manager: no allocation)

    @property
    def free_blocks(self) -> int:
        return self.pool.free_blocks

    # ---- lookups ---------------------------------------------------------------------------------------------
    def get_computed_blocks(self, r: Request) -> PrefixHit:
        """The prompt's cached leading blocks (the trace's reuse bounds a first admission's history hit), the
        blocks a tier or the previous instance could add, and the hit blocks in the free queue. The result is this
        manager's one :class:`PrefixHit`, valid until the next call (the scheduler uses it at once)."""
        pool, bs = self.pool, self.bs
        total = r.total_tokens
        max_hit = (total - 1) // bs  # vLLM recomputes at least the last token
        pfx_hit = prog_hit = 0
        bound = max_hit
        if self.prefix_caching:
            if r.pfx is not None:
                pfx_hit = max(0, min(r.pfx.present, r.base, max_hit))
            elif r.chain:
                pfx_hit = chain_hit(r, max_hit)
            bound = min(max_hit, total // bs if r.admitted else r.reuse // bs)
            if pfx_hit == r.base:  # chained hashes: history blocks hit only after the whole prefix
                prog_hit = pool.hit_blocks(r.prog, bound)
        ext_source, ext_blocks, link = ("", 0, None)
        if self.residency is not None and pfx_hit == r.base and self.prefix_caching:
            ext_source, ext_blocks, link = self.residency.external_hit(r, r.base + prog_hit, bound)
        evictable = (pool.evictable(r.pfx, pfx_hit) if r.pfx is not None else 0) + pool.evictable(r.prog, prog_hit)
        chain = r.chain
        for k in range(len(chain)):
            evictable += pool.evictable(chain[k], _seg_hit(r, k, pfx_hit))
        hit = self._hit
        hit.pfx_hit, hit.prog_hit, hit.ext_source, hit.ext_blocks, hit.link, hit.evictable = (
            pfx_hit,
            prog_hit,
            ext_source,
            ext_blocks,
            link,
            evictable,
        )
        return hit

    def can_allocate(self, need: int, evictable: int, program: int) -> bool:
        """Is there room for ``need`` new blocks (``evictable`` of the free ones being the request's own hits)?
        Releases pins of other programs under pressure first."""
        while not self.pool.can_allocate(need, evictable):
            if self.residency is None or not self.residency.release_oldest_pin(exclude=program):
                return False
        return True

    # ---- allocation ------------------------------------------------------------------------------------------
    def allocate(self, n: int) -> None:
        """``n`` new blocks for running requests (checked by the caller)."""
        self.pool.allocate(n)

    def allocate_slots(self, r: Request, hit: PrefixHit, new_blocks: int) -> None:
        """Admit ``r``'s KV: take its hit blocks out of the free queue, allocate ``new_blocks``, register the
        shared prefix (its missing blocks count as cached at once) and drop the program's pin (``r`` now holds
        its own references)."""
        pool, chain = self.pool, r.chain
        pfx_hit = hit.pfx_hit
        if r.pfx is not None:
            pool.touch(r.pfx, pfx_hit)
        for k in range(len(chain)):
            pool.touch(chain[k], _seg_hit(r, k, pfx_hit))
        pool.touch(r.prog, hit.prog_hit)
        pool.allocate(new_blocks)
        if r.pfx is not None:
            pool.grow(r.pfx, r.base)
        for k in range(len(chain)):
            pool.grow(chain[k], _seg_end(r, k))
        if self.residency is not None:
            self.residency.consume_pin(r)

    def start_load(self, r: Request, hit: PrefixHit) -> None:
        """Load the blocks ``hit`` found beyond HBM (the request waits; its slots are allocated)."""
        assert self.residency is not None and hit.link is not None
        self.residency.load(r, hit.ext_source, hit.ext_blocks, hit.link)

    # ---- freeing ---------------------------------------------------------------------------------------------
    def grow_to(self, r: Request, tokens: int) -> None:
        """Record that ``r`` has slots for ``tokens`` tokens: full blocks join its history segment.

        Done lazily, when the request releases its blocks: while a request runs, its history segment is held
        (``ref > 0``) and nothing else reads how far it extends. The shared prefix is grown at admission,
        because other requests hit it while this one runs."""
        full = tokens // self.bs
        if full > r.base:
            self.pool.grow(r.prog, full)
        r.partial = 1 if tokens % self.bs and full >= r.base else 0

    def free_partial(self, r: Request) -> None:
        """Bring the history segment up to date and free the partial last block (pins keep the rest)."""
        self.grow_to(r, r.computed)
        self.pool.free_anonymous(r.partial)
        r.partial = 0

    def release_segments(self, r: Request) -> None:
        self.pool.release(r.prog)
        if r.pfx is not None:
            self.pool.release(r.pfx)
        for k in range(len(r.chain) - 1, -1, -1):  # reverse order, like the blocks
            self.pool.release(r.chain[k])

    def free(self, r: Request) -> None:
        """Free everything ``r`` holds, in vLLM's reverse order (partial block, history, shared prefix)."""
        self.free_partial(r)
        self.release_segments(r)

    def release_oldest_pin(self, force: bool = False) -> bool:
        """Release the oldest pin (any program; with ``force`` even without ``unpin_on_pressure``)."""
        return self.residency is not None and self.residency.release_oldest_pin(exclude=-1, force=force)

    def retain(self, r: Request, now: float, recompute_s: Callable[[], float]) -> tuple[Decision, str] | None:
        """A finished call's KV through its tool gap: the retention policy decides (release, drop, pin, offload)
        and this applies it; ``(decision, action applied)``, or None when there is no decision to make (the
        program's last call, or no policy: released). ``recompute_s`` prices a prefill of the context."""
        if r.last or self.retention is None:
            self.free(r)
            return None
        res = self.residency
        blocks = max(0, r.computed // self.bs - r.base)
        swap_s = None
        if res is not None and res.tiers:
            swap_s = 2 * blocks * res.block_bytes / res.tiers[0].link.bytes_per_s
        ctx = GapContext(
            now_s=now,
            context_blocks=blocks,
            used_blocks=self.pool.used_blocks,
            recompute_s=recompute_s,
            swap_s=swap_s,
            true_gap_s=r.next_gap_s,
        )
        d = self.retention.decide(r, ctx)
        action = d.action
        if action in ("pin", "offload") and res is None:
            action = "release"
        if action == "release":
            self.free(r)
        elif action == "drop":
            self.free(r)
            self.pool.drop(r.prog)
        elif action == "pin":
            assert res is not None
            self.free_partial(r)
            res.pin(r, d.ttl_s)
        else:
            assert res is not None
            self.free_partial(r)

            def written() -> None:
                self.release_segments(r)
                res.on_ready()

            if not res.offload(r, written):
                self.release_segments(r)
                action = "release"
        return d, action
