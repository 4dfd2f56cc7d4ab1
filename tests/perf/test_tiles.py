"""FlashAttention-2 tiling: tile shapes and occupancy from the kernel's source, KV tiles per query block, and the
list-scheduled critical path, by hand and as properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.perf.tiles import block_tiles, ctas_per_sm, makespan_blocks, makespan_tiles, tile_flops, tile_shape


def test_tile_shapes_follow_the_split_kv_dispatch() -> None:
    assert tile_shape(64) == (64, 256)
    assert tile_shape(128) == (64, 128)
    assert tile_shape(256) == (64, 64)
    assert tile_flops(128) == 4 * 64 * 128 * 128
    with pytest.raises(ValueError, match="head_dim"):
        tile_shape(0)


def test_ctas_per_sm_by_shared_memory() -> None:
    # head_dim 128: Q 64x128 + K and V 128x128, bf16 = 80 KiB
    assert ctas_per_sm(100, 128) == 1  # sm_86 / sm_89 / sm_120
    assert ctas_per_sm(164, 128) == 2  # sm_80
    assert ctas_per_sm(228, 128) == 2  # sm_90
    assert ctas_per_sm(10, 128) == 1  # never below one


def test_block_tiles_by_hand() -> None:
    # causal, no prefix: block i reads 64 (i + 1) keys = ceil(64 (i + 1) / 128) tiles of 128
    assert block_tiles(1024, 0, 128) == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8]
    assert block_tiles(16, 16384, 128) == [129]  # one short block over a long cache
    assert block_tiles(100, 28, 128) == [1, 1]  # 28 + 64 = 92 keys, then 28 + 100 = 128 keys
    assert block_tiles(256, 0, 128, shape=(128, 64)) == [2, 4]  # another tiling, to test it against a profile
    assert makespan_tiles([(256, 0)], heads=1, slots=1, head_dim=128, shape=(128, 64)) == 6
    with pytest.raises(ValueError, match="chunk"):
        block_tiles(0, 0, 128)


def test_makespan_by_hand() -> None:
    # one wave: the longest CTA
    assert makespan_tiles([(1024, 0)], heads=2, slots=64, head_dim=128) == 8
    # blocks [1, 1, 2, 2] on 2 slots, in order: [1, 1] -> [3, 1] -> [3, 3]
    assert makespan_tiles([(256, 0)], heads=1, slots=2, head_dim=128) == 3
    # two sequences in one call: CTAs of the second follow the first's, per head
    assert makespan_tiles([(64, 0), (64, 300)], heads=1, slots=1, head_dim=128) == 1 + 3
    assert makespan_tiles([], heads=4, slots=8, head_dim=128) == 0
    with pytest.raises(ValueError, match="slots"):
        makespan_tiles([(16, 0)], heads=1, slots=0, head_dim=128)


@settings(max_examples=60, deadline=None)
@given(
    chunk=st.integers(1, 4096),
    prefix=st.integers(0, 40_000),
    extra=st.integers(1, 2048),
    heads=st.sampled_from([4, 8, 32, 64]),
    slots=st.sampled_from([82, 128, 188, 216]),
)
def test_makespan_never_falls_with_more_work(chunk: int, prefix: int, extra: int, heads: int, slots: int) -> None:
    base = makespan_tiles([(chunk, prefix)], heads, slots, 128)
    total = heads * sum(block_tiles(chunk, prefix, 128))
    assert max(block_tiles(chunk, prefix, 128)) <= base <= max(total, 1)
    assert base >= total / slots  # no slot idles while work waits
    assert makespan_tiles([(chunk + extra, prefix)], heads, slots, 128) >= base
    assert makespan_tiles([(chunk, prefix + extra)], heads, slots, 128) >= base
    assert makespan_tiles([(chunk, prefix), (extra, 0)], heads, slots, 128) >= base


def _heap_makespan(blocks: list[int], heads: int, slots: int) -> int:
    """The min-heap formulation of list scheduling, the reference for makespan_blocks."""
    import heapq

    works = [w for w in blocks if w > 0] * heads
    if not works:
        return 0
    free = [0] * min(slots, len(works))
    for w in works:
        heapq.heapreplace(free, free[0] + w)
    return max(free)


@settings(max_examples=300, deadline=None)
@given(blocks=st.lists(st.integers(0, 300), max_size=40), heads=st.integers(1, 64), slots=st.integers(1, 300))
def test_makespan_blocks_equals_the_heap_formulation(blocks: list[int], heads: int, slots: int) -> None:
    assert makespan_blocks(blocks, heads, slots) == _heap_makespan(blocks, heads, slots)
