"""Exact-order tests of the KV block pool, in the style of vLLM's tests/v1/core/test_prefix_caching.py.

Block ids here are vLLM's minus one (no null block). Each test builds a fresh pool.
"""

from __future__ import annotations

import pytest

from agentreplay.kv import BlockPool, FreeBlockQueue, HashIdKeyer, SegmentKeyer


def keyer(pool: BlockPool, program: str, prefix_tokens: int = 0) -> SegmentKeyer:
    """Program ``program`` whose context starts with ``prefix_tokens`` tokens of the shared prefix "sys"."""
    return pool.keyer(program, "sys" if prefix_tokens else None, prefix_tokens)


def snapshot(pool: BlockPool) -> tuple:
    """Everything observable, to assert that a refused call changed nothing."""
    return (
        pool.free_queue_ids(),
        [(b.ref_cnt, b.key) for b in pool.blocks],
        pool.num_cached_free,
        pool.query_tokens,
        pool.hit_tokens,
        pool.num_evictions,
    )


# ---------------------------------------------------------------- free queue and keys
def test_free_queue_lru_order_and_middle_removal() -> None:
    q = FreeBlockQueue(5)
    assert list(q) == [0, 1, 2, 3, 4] and len(q) == 5
    assert q.popleft() == 0 and q.peek() == 1
    q.remove(3)
    assert list(q) == [1, 2, 4] and 3 not in q and 2 in q
    q.append(3)
    q.appendleft(0)
    assert list(q) == [0, 1, 2, 4, 3] and len(q) == 5
    with pytest.raises(KeyError):
        q.append(2)
    b = q.popleft()
    with pytest.raises(KeyError):
        q.remove(b)
    assert [q.popleft() for _ in range(4)] == [1, 2, 4, 3]
    assert len(q) == 0 and list(q) == []
    with pytest.raises(IndexError):
        q.popleft()
    q.append(4)
    assert list(q) == [4]
    assert list(FreeBlockQueue(0)) == []


def test_free_queue_bulk_pop_and_extend() -> None:
    q = FreeBlockQueue(6)
    assert q.popleft_n(0) == [] and q.popleft_n(4) == [0, 1, 2, 3]
    assert list(q) == [4, 5] and 2 not in q
    q.extend([3, 1])
    assert list(q) == [4, 5, 3, 1] and len(q) == 4 and 1 in q
    with pytest.raises(KeyError):
        q.extend([0, 5])
    with pytest.raises(IndexError):
        q.popleft_n(9)
    q2 = FreeBlockQueue(3)
    assert q2.popleft_n(3) == [0, 1, 2] and list(q2) == []
    q2.extend([2, 0])
    assert list(q2) == [2, 0] and q2.peek() == 2


def test_segment_keys_straddling_block_belongs_to_program() -> None:
    pool = BlockPool(4, 16)
    a, b = keyer(pool, "A", 20), keyer(pool, "B", 20)
    assert a.prefix_blocks == 1
    assert a.key(0) == b.key(0) == ("sys", None, 0)
    assert a.key(1) == ("sys", "A", 1) != b.key(1)  # tokens 16..31 hold 4 prefix + 12 history tokens
    assert keyer(pool, "A", 0).key(0) == (None, "A", 0)
    assert SegmentKeyer.for_program("sys", 32, "A", 16).key(1) == ("sys", None, 1)
    with pytest.raises(ValueError):
        SegmentKeyer("sys", None, 1)
    with pytest.raises(ValueError):
        SegmentKeyer(None, "A", 2)
    h = HashIdKeyer((11, 12), owner="A")
    assert [h.key(i) for i in range(3)] == [11, 12, ("gen", "A", 2)]


# ---------------------------------------------------------------- prefix caching, exact order
@pytest.mark.parametrize("fresh_first", [True, False])
def test_prefill_share_free_and_evict_order(fresh_first: bool) -> None:
    pool = BlockPool(10, 16, fresh_blocks_first=fresh_first)
    # A: 48 shared-prefix tokens (3 full blocks) + 7 history tokens (a partial block).
    assert pool.allocate("A", keyer(pool, "A", 48), 55)
    assert pool.block_ids("A") == (0, 1, 2, 3) and pool.hit_blocks("A") == 0
    assert [pool.blocks[i].key for i in range(4)] == [("sys", None, 0), ("sys", None, 1), ("sys", None, 2), None]

    # B shares the prefix: hits exactly its 3 full blocks while A still runs, not A's partial block.
    assert pool.match_prefix(keyer(pool, "B", 48), 53) == 3
    assert pool.allocate("B", keyer(pool, "B", 48), 53)
    assert pool.block_ids("B") == (0, 1, 2, 4)
    assert [pool.blocks[i].ref_cnt for i in range(5)] == [2, 2, 2, 1, 1]
    assert pool.num_free_blocks == 5 and pool.num_used == 5 and pool.usage == 0.5

    pool.free("A")
    pool.free("B")
    assert pool.num_free_blocks == 10 and pool.num_cached_free == 3
    if fresh_first:  # vLLM main: unkeyed partial blocks (B's 4, A's 3) are prepended, prefix tail first
        assert pool.free_queue_ids() == [4, 3, 5, 6, 7, 8, 9, 2, 1, 0]
    else:  # older vLLM: all appended, each request in reverse
        assert pool.free_queue_ids() == [5, 6, 7, 8, 9, 3, 4, 2, 1, 0]
    pool.check_invariants()

    # C hits the cached-free prefix blocks (touch removes them from the free queue).
    assert pool.allocate("C", keyer(pool, "C", 48), 54)
    new_block = 4 if fresh_first else 5
    assert pool.block_ids("C") == (0, 1, 2, new_block)
    assert pool.num_free_blocks == 6 and pool.num_cached_free == 0
    pool.free("C")

    # A miss that takes the whole pool evicts in free-queue order, the prefix chain tail first.
    order = pool.free_queue_ids()
    assert order[-3:] == [2, 1, 0]
    assert pool.allocate("D", keyer(pool, "D", 0), 160)
    assert list(pool.block_ids("D")) == order
    assert pool.num_evictions == 3 and pool.num_free_blocks == 0
    assert pool.match_prefix(keyer(pool, "E", 48), 55) == 0
    assert pool.hit_tokens == 2 * 48 and pool.query_tokens == 55 + 53 + 54 + 160
    pool.check_invariants()


def test_next_turn_hits_own_history_other_program_only_prefix() -> None:
    pool = BlockPool(20, 16)
    ka = keyer(pool, "A", 20)  # prefix = block 0 + 4 tokens of block 1
    assert pool.allocate("A0", ka, 40)
    assert pool.append_tokens("A0", 30)  # decode to 70 tokens: blocks 3 and 4 allocated, 2 and 3 fill
    assert pool.block_ids("A0") == (0, 1, 2, 3, 4)
    assert [pool.blocks[i].key for i in range(5)] == [
        ("sys", None, 0),
        ("sys", "A", 1),
        ("sys", "A", 2),
        ("sys", "A", 3),
        None,
    ]
    pool.free("A0")
    assert pool.free_queue_ids() == [4, *range(5, 20), 3, 2, 1, 0]

    # Turn 1: previous 70 tokens + a 25-token observation; hits the 4 full blocks, not the partial one.
    assert pool.match_prefix(ka, 95) == 4
    assert pool.allocate("A1", ka, 95)
    assert pool.block_ids("A1") == (0, 1, 2, 3, 4, 5) and pool.hit_blocks("A1") == 4
    # Another program with the same prefix hits only the block lying entirely inside the prefix.
    assert pool.match_prefix(keyer(pool, "B", 20), 40) == 1
    assert pool.hit_tokens == 64 and pool.query_tokens == 135
    pool.check_invariants()


def test_freed_blocks_hit_until_reused_tail_of_chain_evicted_first() -> None:
    pool = BlockPool(6, 4)
    ka = keyer(pool, "A")
    assert pool.allocate("A", ka, 13)  # blocks 0,1,2 full, 3 partial
    pool.free("A")
    assert pool.free_queue_ids() == [3, 4, 5, 2, 1, 0]
    assert pool.allocate("X", keyer(pool, "X"), 12)  # takes 3, 4, 5: no cached block touched
    assert pool.block_ids("X") == (3, 4, 5) and pool.num_evictions == 0
    assert pool.match_prefix(ka, 13) == 3
    assert pool.allocate("Y", keyer(pool, "Y"), 4)  # evicts block 2 = A's chain tail
    assert pool.block_ids("Y") == (2,) and pool.num_evictions == 1
    assert pool.match_prefix(ka, 13) == 2
    assert pool.allocate("Z", keyer(pool, "Z"), 4)
    assert pool.block_ids("Z") == (1,) and pool.match_prefix(ka, 13) == 1
    assert pool.num_cached_free == 1
    pool.check_invariants()


def test_hit_capped_one_token_short_of_prompt() -> None:
    pool = BlockPool(8, 4)
    ka = keyer(pool, "A")
    assert pool.allocate("A", ka, 8)
    pool.free("A")
    assert pool.match_prefix(ka, 8) == 1  # the last prompt token is recomputed, as in get_computed_blocks
    assert pool.match_prefix(ka, 9) == 2


def test_admission_all_or_nothing_counts_cached_free_hits() -> None:
    pool = BlockPool(4, 4)
    ka = keyer(pool, "A")
    assert pool.allocate("A0", ka, 8)
    pool.free("A0")
    assert pool.free_queue_ids() == [2, 3, 1, 0] and pool.num_cached_free == 2
    before = snapshot(pool)
    # 2 cached-free hits + 3 new blocks = 5 > 4 free blocks, although only 3 are "new".
    assert pool.num_blocks_to_allocate(ka, 20) == 5
    assert not pool.allocate("A1", ka, 20)
    assert "A1" not in pool and snapshot(pool) == before
    assert not pool.allocate("A1", ka, 16, reserved_blocks=1)
    assert snapshot(pool) == before
    assert pool.allocate("A1", ka, 16)
    assert pool.block_ids("A1") == (0, 1, 2, 3) and pool.num_free_blocks == 0
    # Growth inside the partial... here the last block is full, so one more token needs a block: refused.
    before = snapshot(pool)
    assert not pool.append_tokens("A1", 1)
    assert snapshot(pool) == before and pool.num_tokens("A1") == 16
    pool.check_invariants()


def test_append_within_block_needs_no_allocation() -> None:
    pool = BlockPool(1, 4)
    assert pool.allocate("A", keyer(pool, "A"), 1)
    assert pool.append_tokens("A", 2) and pool.append_tokens("A", 0)
    assert pool.num_tokens("A") == 3 and pool.block_ids("A") == (0,)
    assert not pool.append_tokens("A", 2)
    assert pool.num_tokens("A") == 3


def test_decode_crossing_block_boundary_registers_key() -> None:
    pool = BlockPool(4, 4)
    ka = keyer(pool, "A")
    assert pool.allocate("A", ka, 3)
    assert pool.blocks[0].key is None
    assert pool.append_tokens("A", 1)  # block 0 now full
    assert pool.blocks[0].key == (None, "A", 0) and pool.block_ids("A") == (0,)
    assert pool.append_tokens("A", 1)  # crosses into block 1, which stays unkeyed
    assert pool.block_ids("A") == (0, 1) and pool.blocks[1].key is None
    pool.free("A")
    assert pool.match_prefix(ka, 10) == 1
    pool.check_invariants()


def test_reallocation_evicts_key_from_cached_map() -> None:
    pool = BlockPool(2, 4)
    ka = keyer(pool, "A")
    assert pool.allocate("A", ka, 8)
    pool.free("A")
    assert pool.num_cached_free == 2
    assert pool.allocate("B", keyer(pool, "B"), 3)
    assert pool.block_ids("B") == (1,)  # the chain tail
    assert pool.blocks[1].key is None and pool.num_evictions == 1 and pool.num_cached_free == 1
    assert pool.match_prefix(ka, 9) == 1
    pool.check_invariants()


def test_duplicate_keys_first_registered_wins_and_survives_eviction_of_one() -> None:
    pool = BlockPool(8, 4)
    ka, kb = keyer(pool, "A", 8), keyer(pool, "B", 8)
    assert pool.allocate("A", ka, 10, num_tokens=3)  # chunked prefill: first chunk, no full block yet
    assert pool.allocate("B", kb, 10)  # misses (A's block 0 is not full) and keys blocks 1, 2
    assert pool.block_ids("B") == (1, 2, 3)
    assert pool.append_tokens("A", 7)  # A's blocks 0 and 4 fill with the same prefix keys: duplicates
    assert pool.block_ids("A") == (0, 4, 5)
    pool.check_invariants()
    assert pool.allocate("C", keyer(pool, "C", 8), 9)
    assert pool.block_ids("C")[:2] == (1, 2)  # first registered (B's) blocks are returned
    pool.free("C")
    pool.free("B")
    # Evict B's prefix copies by allocating the free queue up to them; A's copies still hit.
    free_ids = pool.free_queue_ids()
    assert pool.allocate("X", keyer(pool, "X"), 4 * (free_ids.index(1) + 1))
    assert pool.num_evictions == 2 and {1, 2} <= set(pool.block_ids("X"))
    assert pool.match_prefix(keyer(pool, "D", 8), 9) == 2
    pool.free("A")
    pool.check_invariants()


def test_hold_keeps_full_blocks_referenced_through_tool_gap() -> None:
    pool = BlockPool(8, 4)
    ka = keyer(pool, "A")
    assert pool.allocate("A0", ka, 10)  # blocks 0, 1 full; 2 partial
    pool.hold("A0", ("pin", "A"))
    assert "A0" not in pool and pool.block_ids(("pin", "A")) == (0, 1)
    assert pool.num_tokens(("pin", "A")) == 8
    assert pool.free_queue_ids()[0] == 2  # partial block released (fresh, to the head)
    # Held blocks are not evictable: only 6 blocks can be allocated.
    assert not pool.allocate("X", keyer(pool, "X"), 25)
    assert pool.allocate("X", keyer(pool, "X"), 24)
    pool.free("X")
    # Next turn hits the held blocks (ref_cnt 2), then the pin is released.
    assert pool.allocate("A1", ka, 14)
    assert pool.block_ids("A1")[:2] == (0, 1) and pool.blocks[0].ref_cnt == 2
    pool.free(("pin", "A"))
    assert pool.blocks[0].ref_cnt == 1
    pool.check_invariants()
    pool.free("A1")
    assert pool.num_used == 0
    with pytest.raises(KeyError):
        pool.free("A1")


def test_argument_errors() -> None:
    pool = BlockPool(4, 4)
    ka = keyer(pool, "A")
    with pytest.raises(ValueError):
        BlockPool(0)
    with pytest.raises(ValueError):
        pool.allocate("A", ka, 0)
    assert pool.allocate("A", ka, 8)
    with pytest.raises(ValueError):
        pool.allocate("A", ka, 8)
    with pytest.raises(ValueError):
        pool.append_tokens("A", -1)
    pool.free("A")
    with pytest.raises(ValueError):  # 4 cached tokens; a 4-token chunk would compute nothing
        pool.allocate("B", ka, 8, num_tokens=4)
    assert pool.blocks_needed(17, 0) == 5 and pool.blocks_needed(17, 1) == 4 and pool.blocks_needed(3, 5) == 0
