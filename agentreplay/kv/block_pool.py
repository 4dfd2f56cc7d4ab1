"""Paged KV block pool of one instance (HBM tier) with vLLM v1 automatic prefix caching semantics.

Follows vLLM v1's BlockPool (vllm/v1/core/block_pool.py: ``touch``, ``get_new_blocks``,
``_maybe_evict_cached_block``, ``free_blocks``, ``cache_full_blocks``), the admission check of
KVCacheManager (vllm/v1/core/kv_cache_manager.py: ``get_computed_blocks``, ``allocate_slots``;
``get_num_blocks_to_allocate`` in vllm/v1/core/single_type_kv_cache_manager.py) and the reverse-order free of
``SingleTypeKVCacheManager.free``. Differences, all deliberate:

- block identity is a structural key from a :class:`~agentreplay.kv.keys.BlockKeyer`, not a token hash;
- there is no null block: pass vLLM's ``num_gpu_blocks - 1`` to model the same usable capacity (vLLM's
  block id ``b`` is this pool's ``b - 1``);
- one KV cache group (full attention only), no sliding window, no speculative lookahead;
- ``hold`` (a retention hook) and a ``reserved_blocks`` headroom argument are additions.

Units: ``*_tokens`` are tokens, ``*_blocks`` and block ids are blocks of ``block_size`` tokens.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from agentreplay.kv.free_queue import FreeBlockQueue
from agentreplay.kv.keys import BlockKey, BlockKeyer, SegmentKeyer

OwnerId = Hashable
"""A request id, or the id of a holder created by :meth:`BlockPool.hold`; one namespace for both."""


@dataclass(slots=True)
class KVBlock:
    """One block. ``key`` is set only while the block is full and registered in the cached map."""

    block_id: int
    ref_cnt: int = 0
    key: BlockKey | None = None


@dataclass(slots=True)
class _Seq:
    """Blocks owned by one request or holder. ``len(block_ids) == ceil(num_tokens / block_size)``."""

    keyer: BlockKeyer
    block_ids: list[int]
    num_tokens: int
    hit_blocks: int


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` tokens, an LRU free queue and a key -> block cached map.

    A block is in exactly one state: *used* (``ref_cnt > 0``, owned by one or more sequences), *cached free*
    (``ref_cnt == 0``, in the free queue, key set: still hit-able) or *empty free* (in the free queue, no key).
    Allocation pops the free-queue head and evicts its key at that moment; a prefix hit on a cached-free block
    unlinks it from the queue ("touch"). Freeing walks a sequence's blocks in reverse so the tail of a chain is
    evicted before its head. With ``fresh_blocks_first`` (vLLM main, ``BlockPool.free_blocks``), freed blocks
    without a key go to the queue head, since they can never be hit; otherwise (older vLLM) everything goes to
    the tail.

    Invariants (checked by :meth:`check_invariants`):
        - ``num_free_blocks + num_used == num_blocks``;
        - a block is in the free queue iff its ``ref_cnt == 0``; ``ref_cnt`` is never negative and equals the
          number of owning sequences that list it;
        - every key in the cached map maps to blocks whose ``key`` is that key, and every block with a key is in
          the map under it (duplicates allowed, as in vLLM: the first registered is returned);
        - ``num_cached_free`` equals the number of free blocks with a key;
        - each owner's ``len(block_ids) == ceil(num_tokens / block_size)``; its full blocks carry
          ``keyer.key(i)`` and its partial last block carries no key.

    Complexity: every public call is O(blocks it touches, allocates or frees); nothing scans the pool except
    :meth:`check_invariants` and :meth:`free_queue_ids`.
    """

    def __init__(self, num_blocks: int, block_size: int = 16, *, fresh_blocks_first: bool = True) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"need num_blocks > 0 and block_size > 0, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.fresh_blocks_first = fresh_blocks_first
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self._free = FreeBlockQueue(num_blocks)
        # key -> block id, or -> {block id: None} (insertion ordered) once a key has duplicates.
        self._cached: dict[BlockKey, int | dict[int, None]] = {}
        self._seqs: dict[OwnerId, _Seq] = {}
        self._num_cached_free = 0
        self.query_tokens = 0
        """Prompt tokens of successful admissions (re-admissions after preemption included)."""
        self.hit_tokens = 0
        """Of those, tokens served from the prefix cache (whole blocks)."""
        self.num_evictions = 0
        """Cached blocks whose key was dropped because the block was reallocated."""

    # ------------------------------------------------------------------ queries
    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue (empty + cached free): what an allocation may consume."""
        return len(self._free)

    @property
    def num_cached_free(self) -> int:
        """Free blocks that still carry a key (evictable prefix-cache entries)."""
        return self._num_cached_free

    @property
    def num_used(self) -> int:
        """Blocks with ``ref_cnt > 0``."""
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, in [0, 1] (vLLM's ``get_usage`` without the null block)."""
        return self.num_used / self.num_blocks

    @property
    def hit_rate(self) -> float:
        """``hit_tokens / query_tokens`` (0 before any admission)."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    def __contains__(self, owner: OwnerId) -> bool:
        return owner in self._seqs

    def block_ids(self, owner: OwnerId) -> tuple[int, ...]:
        """The owner's block table, in token order."""
        return tuple(self._seqs[owner].block_ids)

    def num_tokens(self, owner: OwnerId) -> int:
        """Tokens the owner has slots for."""
        return self._seqs[owner].num_tokens

    def hit_blocks(self, owner: OwnerId) -> int:
        """Leading blocks served from the prefix cache when the owner was admitted."""
        return self._seqs[owner].hit_blocks

    def free_queue_ids(self) -> list[int]:
        """Free block ids from head (next evicted) to tail. O(num_free); for tests and diagnostics."""
        return list(self._free)

    def keyer(self, program_id: Hashable, prefix_id: Hashable | None = None, prefix_tokens: int = 0) -> SegmentKeyer:
        """A :class:`SegmentKeyer` built with this pool's block size (a mismatched size would mis-key blocks)."""
        return SegmentKeyer.for_program(prefix_id, prefix_tokens, program_id, self.block_size)

    def blocks_needed(self, num_tokens: int, hit_blocks: int = 0) -> int:
        """New blocks to hold ``num_tokens`` tokens when the first ``hit_blocks`` blocks come from the cache."""
        return max(0, -(-num_tokens // self.block_size) - hit_blocks)

    def match_prefix(self, keyer: BlockKeyer, prompt_tokens: int) -> int:
        """Leading full blocks of a ``prompt_tokens``-token prompt found in the cache. Pure (no stats, no touch).

        Stops at the first miss. Like ``get_computed_blocks`` the hit is capped at ``(prompt_tokens - 1) //
        block_size`` blocks: the last prompt token is always recomputed to get logits.
        """
        return len(self._lookup(keyer, prompt_tokens))

    def num_blocks_to_allocate(self, keyer: BlockKeyer, prompt_tokens: int, num_tokens: int | None = None) -> int:
        """Free blocks :meth:`allocate` with the same arguments would consume: new blocks plus cached-free hits."""
        hits = self._lookup(keyer, prompt_tokens)
        n = prompt_tokens if num_tokens is None else num_tokens
        blocks = self.blocks
        return self.blocks_needed(n, len(hits)) + sum(1 for b in hits if blocks[b].ref_cnt == 0)

    def _lookup(self, keyer: BlockKeyer, prompt_tokens: int) -> list[int]:
        """Block ids of the longest cached prefix (first registered block per key)."""
        cached, key = self._cached, keyer.key
        hits: list[int] = []
        for i in range(max(0, (prompt_tokens - 1) // self.block_size)):
            v = cached.get(key(i))
            if v is None:
                break
            hits.append(v if isinstance(v, int) else next(iter(v)))
        return hits

    # ------------------------------------------------------------------ mutations
    def allocate(
        self,
        req_id: OwnerId,
        keyer: BlockKeyer,
        prompt_tokens: int,
        num_tokens: int | None = None,
        *,
        reserved_blocks: int = 0,
    ) -> bool:
        """Admit ``req_id``: touch its cached prefix, allocate blocks for the rest; all or nothing.

        Args:
            req_id: new owner id (ValueError if it already owns blocks).
            keyer: names the request's blocks; kept for blocks filled later by :meth:`append_tokens`.
            prompt_tokens: full prompt length; sets the hit cap and the hit-rate statistics.
            num_tokens: slots to hold now, hit tokens included (default ``prompt_tokens``). With chunked
                prefill pass ``match_prefix(...) * block_size + chunk_tokens``; it must exceed the hit tokens.
            reserved_blocks: free blocks that must remain after this call (a watermark).

        Returns False, with nothing changed, when ``new blocks + cached-free hits + reserved_blocks`` exceeds
        the free blocks: touching a cached-free hit takes it out of the free queue (``allocate_slots``).
        """
        if req_id in self._seqs:
            raise ValueError(f"owner {req_id!r} already holds blocks")
        if prompt_tokens <= 0:
            raise ValueError(f"prompt_tokens must be > 0, got {prompt_tokens}")
        hits = self._lookup(keyer, prompt_tokens)
        h = len(hits)
        n = prompt_tokens if num_tokens is None else num_tokens
        if n <= h * self.block_size:
            raise ValueError(f"num_tokens={n} must exceed the {h * self.block_size} cached tokens")
        blocks = self.blocks
        need = self.blocks_needed(n, h) + sum(1 for b in hits if blocks[b].ref_cnt == 0)
        if need + reserved_blocks > len(self._free):
            return False
        self._touch(hits)
        seq = _Seq(keyer, hits, h * self.block_size, h)
        self._seqs[req_id] = seq
        self._grow(seq, n)
        self.query_tokens += prompt_tokens
        self.hit_tokens += h * self.block_size
        return True

    def append_tokens(self, owner: OwnerId, n_tokens: int, *, reserved_blocks: int = 0) -> bool:
        """Grow ``owner`` by ``n_tokens`` slots (decode or a later prefill chunk); all or nothing.

        Blocks that become full get ``keyer.key(i)`` registered, so decode output is hit-able by the program's
        next turn (vLLM caches decode-filled blocks too). Returns False, unchanged, if the new blocks plus
        ``reserved_blocks`` exceed the free blocks.
        """
        if n_tokens < 0:
            raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
        seq = self._seqs[owner]
        new_total = seq.num_tokens + n_tokens
        if self.blocks_needed(new_total, len(seq.block_ids)) + reserved_blocks > len(self._free):
            return False
        self._grow(seq, new_total)
        return True

    def free(self, owner: OwnerId) -> None:
        """Release all of ``owner``'s blocks (finish, abort, or recompute preemption). KeyError if unknown.

        Blocks reaching ``ref_cnt == 0`` enter the free queue tail-of-sequence first; keyed ones stay hit-able
        until reallocated.
        """
        self._release(self._seqs.pop(owner).block_ids)

    def hold(self, owner: OwnerId, holder: OwnerId) -> None:
        """Move ``owner``'s full (keyed) blocks to ``holder`` without dropping their references.

        This is the retention hook: a TTL pin or Continuum-style policy calls ``hold(req, ("pin", program))``
        when a turn finishes, so the program's blocks keep ``ref_cnt > 0`` through the tool gap, cannot be
        evicted, and are still hit by the next turn (which touches them, ``ref_cnt`` 2); the policy then calls
        ``free(holder)`` when the TTL expires or after the next turn is admitted. The partial last block is
        released now: it has no key, so no later sequence can reuse it.
        """
        if holder in self._seqs:
            raise ValueError(f"holder {holder!r} already holds blocks")
        seq = self._seqs.pop(owner)
        full = seq.num_tokens // self.block_size
        if full < len(seq.block_ids):
            self._release(seq.block_ids[full:])
            del seq.block_ids[full:]
        seq.num_tokens = full * self.block_size
        self._seqs[holder] = seq

    # ------------------------------------------------------------------ internals
    def _touch(self, block_ids: list[int]) -> None:
        blocks, free = self.blocks, self._free
        for b in block_ids:
            blk = blocks[b]
            if blk.ref_cnt == 0:
                free.remove(b)
                self._num_cached_free -= 1  # only keyed blocks can be hit
            blk.ref_cnt += 1

    def _grow(self, seq: _Seq, new_total: int) -> None:
        """Give ``seq`` slots up to ``new_total`` tokens and key its newly full blocks. Caller checked capacity."""
        bs, blocks, ids = self.block_size, self.blocks, seq.block_ids
        new_ids = self._free.popleft_n(self.blocks_needed(new_total, len(ids)))
        cached = self._cached
        for b in new_ids:
            blk = blocks[b]
            k = blk.key
            if k is not None:  # reusing a cached-free block evicts its key now (_maybe_evict_cached_block)
                if cached[k] == b:
                    del cached[k]
                    blk.key = None
                else:
                    self._uncache(blk)
                self._num_cached_free -= 1
                self.num_evictions += 1
            blk.ref_cnt = 1
        ids += new_ids
        key = seq.keyer.key
        for i in range(seq.num_tokens // bs, new_total // bs):  # hit blocks lie below this range
            blk = blocks[ids[i]]
            k = blk.key = key(i)
            if k in cached:
                self._add_duplicate(k, blk.block_id)
            else:
                cached[k] = blk.block_id
        seq.num_tokens = new_total

    def _release(self, block_ids: list[int]) -> None:
        blocks = self.blocks
        fresh: list[int] = []
        tail: list[int] = []
        for b in reversed(block_ids):
            blk = blocks[b]
            blk.ref_cnt -= 1
            if blk.ref_cnt:
                continue
            if blk.key is not None:
                tail.append(b)
                self._num_cached_free += 1
            elif self.fresh_blocks_first:
                fresh.append(b)
            else:
                tail.append(b)
        self._free.extend(tail)
        for b in reversed(fresh):  # fresh[0] (the sequence's tail) ends up at the head
            self._free.appendleft(b)

    def _add_duplicate(self, key: BlockKey, block_id: int) -> None:
        """Register a second block under ``key``; vLLM keeps duplicates so block tables stay append-only."""
        v = self._cached[key]
        if isinstance(v, int):
            self._cached[key] = {v: None, block_id: None}
        else:
            v[block_id] = None

    def _uncache(self, blk: KVBlock) -> None:
        key = blk.key
        v = self._cached[key]
        if isinstance(v, int):
            del self._cached[key]
        else:
            del v[blk.block_id]
            if len(v) == 1:
                self._cached[key] = next(iter(v))
        blk.key = None

    # ------------------------------------------------------------------ checking
    def check_invariants(self) -> None:
        """Raise AssertionError naming the first broken invariant (see the class docstring). O(pool)."""

        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise AssertionError(msg)

        bs, blocks = self.block_size, self.blocks
        queued = list(self._free)
        need(len(queued) == len(self._free) == len(set(queued)), "free queue length/duplicates")
        need(len(self._free) + self.num_used == self.num_blocks, "free + used != total")
        refs = [0] * self.num_blocks
        for owner, seq in self._seqs.items():
            ids = seq.block_ids
            need(len(ids) == -(-seq.num_tokens // bs), f"{owner!r}: {len(ids)} blocks for {seq.num_tokens} tokens")
            need(len(set(ids)) == len(ids), f"{owner!r}: a block listed twice")
            for i, b in enumerate(ids):
                refs[b] += 1
                want = seq.keyer.key(i) if (i + 1) * bs <= seq.num_tokens else None
                need(blocks[b].key == want, f"{owner!r}: block {b} (index {i}) key {blocks[b].key!r} != {want!r}")
        in_queue = set(queued)
        for blk in blocks:
            b = blk.block_id
            need(blk.ref_cnt >= 0, f"block {b}: negative ref_cnt")
            need(blk.ref_cnt == refs[b], f"block {b}: ref_cnt {blk.ref_cnt} but {refs[b]} owners")
            need((b in in_queue) == (blk.ref_cnt == 0), f"block {b}: free-queue membership vs ref_cnt")
            if blk.key is not None:
                v = self._cached.get(blk.key)
                need(v == b or (isinstance(v, dict) and b in v), f"block {b}: keyed but not in the map")
        for key, v in self._cached.items():
            ids = [v] if isinstance(v, int) else list(v)
            need(isinstance(v, int) or len(ids) >= 2, f"{key!r}: degenerate duplicate entry")
            need(all(blocks[b].key == key for b in ids), f"{key!r}: maps to a block with another key")
        n_cf = sum(1 for b in queued if blocks[b].key is not None)
        need(n_cf == self._num_cached_free, f"num_cached_free {self._num_cached_free} != {n_cf}")
        need(0 <= self.hit_tokens <= self.query_tokens, "hit_tokens out of [0, query_tokens]")
