"""FlashAttention-2 forward tiling: the critical path of one prefill attention kernel, in KV-tile iterations.

A FLOP count prices a prefill attention kernel as if every SM shared its work evenly. The kernel does not: it
runs one CTA per (query block, sequence, head), each CTA walks the KV tiles its causal mask needs one after the
other, and the GPU runs at most ``slots`` CTAs at once. A short chunk over a long cache is a few long CTAs on a
mostly idle GPU; a long causal chunk ends with a tail of its longest query blocks. This module prices that
critical path, with the tile shapes of the kernel vLLM runs on Ampere, Ada and consumer Blackwell GPUs
(``vllm_flash_attn``, FlashAttention-2):

- vLLM's attention metadata always passes a block table (a paged KV cache), and FlashAttention-2's
  ``mha_varlen_fwd`` then runs the split-KV kernel whatever the number of splits (``run_mha_fwd(params,
  stream, /*force_split_kernel=*/paged_KV)``, ``csrc/flash_attn/flash_api.cpp``), but splits the KV over
  several CTAs only for decode ("Only apply split-k for decoding": ``set_params_splitkv`` runs only when the
  one-token queries of a GQA batch are packed, ``seqlenq_ngroups_swapped``), so each query block of a prefill
  chunk walks all its KV tiles in one CTA;
- that kernel's tile is ``kBlockM = 64`` query rows by ``kBlockN`` keys, ``kBlockN = 256 / 128 / 64`` for head
  dims up to 64 / 128 / larger, 4 warps (``run_mha_fwd_splitkv_dispatch``,
  ``csrc/flash_attn/src/flash_fwd_launch_template.h``); its grid is ``dim3(num_m_blocks, batch, heads)`` when
  the KV is not split, so CTAs are dispatched query block fastest, then sequence, then head;
- shared memory holds the Q tile and one K and one V tile (bf16): ``(kBlockM + 2 kBlockN) * head_dim * 2``
  bytes, 80 KiB at head_dim 128, so an SM with 100 KiB of shared memory (sm_86, sm_89, sm_120) runs one CTA at
  a time and one with 164 or 228 KiB (sm_80, sm_90) runs two;
- the causal mask is aligned to the end of the keys (a chunk after ``prefix`` cached tokens): query block ``i``
  of a chunk of ``c`` tokens reads ``prefix + min((i + 1) * kBlockM, c)`` keys, i.e. that many keys rounded up to
  whole ``kBlockN`` tiles.

The makespan is list scheduling of the CTAs in dispatch order onto ``slots = SMs x CTAs per SM`` identical
slots, each CTA taking its tile count (blocks of a shorter sequence in a batch of chunks exit at once). What a
tile costs is a calibrated efficiency (:class:`agentreplay.perf.table.Refinement`,
``attn_prefill_tile_efficiency``); the validation report compares this form with the FLOP form on the measured
profiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Final

#: Query rows per CTA of FlashAttention-2's split-KV forward kernel, every head dim.
BLOCK_M: Final = 64
ELEM_BYTES: Final = 2  #: bf16 Q, K and V tiles in shared memory


def tile_shape(head_dim: int) -> tuple[int, int]:
    """``(kBlockM, kBlockN)`` of FlashAttention-2's split-KV forward kernel for ``head_dim``."""
    if head_dim < 1:
        raise ValueError(f"head_dim={head_dim!r} must be >= 1")
    return BLOCK_M, 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64


def ctas_per_sm(smem_per_sm_kib: float, head_dim: int) -> int:
    """CTAs of the kernel one SM holds at once, by shared memory (Q tile + one K and one V tile), at least 1."""
    bm, bn = tile_shape(head_dim)
    tile_bytes = (bm + 2 * bn) * head_dim * ELEM_BYTES
    return max(1, int(smem_per_sm_kib * 1024 // tile_bytes))


def tile_flops(head_dim: int) -> float:
    """FLOPs of one full KV tile of one CTA: ``Q K^T`` and ``P V``, ``2 * 2 * kBlockM * kBlockN * head_dim``."""
    bm, bn = tile_shape(head_dim)
    return 4.0 * bm * bn * head_dim


def block_tiles(chunk: int, prefix: int, head_dim: int, shape: tuple[int, int] | None = None) -> list[int]:
    """KV tiles each query block of one causal chunk walks, in query-block order; ``shape`` = ``(kBlockM,
    kBlockN)`` overrides :func:`tile_shape` (to test other tilings against a profile)."""
    if chunk < 1 or prefix < 0:
        raise ValueError(f"chunk={chunk!r} must be >= 1 and prefix={prefix!r} >= 0")
    bm, bn = shape or tile_shape(head_dim)
    return [-(-(prefix + min((i + 1) * bm, chunk)) // bn) for i in range(-(-chunk // bm))]


def makespan_tiles(
    chunks: Sequence[tuple[int, int]], heads: int, slots: int, head_dim: int, shape: tuple[int, int] | None = None
) -> int:
    """Tile iterations on the kernel's critical path for ``chunks`` = ``(chunk_tokens, prefix_tokens)`` per
    sequence of one varlen call, ``heads`` query heads per GPU, ``slots`` concurrent CTAs (module docstring)."""
    if heads < 1 or slots < 1:
        raise ValueError(f"heads={heads!r} and slots={slots!r} must be >= 1")
    return _makespan(tuple((int(c), int(p)) for c, p in chunks), heads, slots, head_dim, shape)


@lru_cache(maxsize=1 << 16)
def _makespan(
    chunks: tuple[tuple[int, int], ...], heads: int, slots: int, head_dim: int, shape: tuple[int, int] | None
) -> int:
    return makespan_blocks([w for c, p in chunks for w in block_tiles(c, p, head_dim, shape)], heads, slots)


def makespan_blocks(blocks: Sequence[int], heads: int, slots: int) -> int:
    """List-scheduled critical path, in tiles, of the CTAs ``blocks`` (tiles per query block of one head, in
    dispatch order) repeated for each of ``heads`` heads on ``slots`` slots; blocks of 0 tiles exit at once.

    Each CTA starts on the slot that frees first. Durations are whole tiles, so the slots' free times are kept as
    counts per tile time (a bucket queue): the earliest free time never decreases, and the makespan is at most
    ``total / slots + longest`` (Graham's bound), so one pass over the CTAs and that many buckets suffices. Equal
    to the min-heap formulation (tested), in O(CTAs + makespan) instead of O(CTAs log slots)."""
    works = [w for w in blocks if w > 0]
    if not works:
        return 0
    per_head = len(works)
    n = per_head * heads
    longest = max(works)
    if n <= slots:
        return longest
    horizon = sum(works) * heads // slots + longest
    count = [0] * (horizon + 1)  # slots that become free at each tile time
    for i in range(slots):  # the first wave starts at once
        count[works[i % per_head]] += 1
    t = 0
    for i in range(slots, n):
        while count[t] == 0:
            t += 1
        count[t] -= 1
        count[t + works[i % per_head]] += 1
    end = horizon
    while count[end] == 0:
        end -= 1
    return end
