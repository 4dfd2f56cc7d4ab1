"""Structural block identity: which full KV block of a sequence is "the same" as another (DESIGN §3).

vLLM v1 names a full block by a chained hash, ``hash_i = H(hash_{i-1}, tokens of block i, extra keys)``
(``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py). Two blocks share a hash exactly when the whole token
prefix up to and including them is equal, which is what makes a longest-prefix walk over hashes correct.

A trace carries token counts, not tokens, so agentreplay names blocks structurally. A request's context is
``[shared prefix S, Ls tokens] + [program P's append-only history]``. With block size B, block i covers tokens
``[i*B, (i+1)*B)``; its chained hash is a function of tokens ``[0, (i+1)*B)``:

- if ``(i+1)*B <= Ls`` those tokens are the first ``(i+1)*B`` tokens of S, the same for every program sharing S,
  so ``key_i = (S, None, i)`` carries exactly the information of the chained hash;
- otherwise they are all of S followed by the first ``(i+1)*B - Ls`` tokens of P's history. The history is
  append-only, so that slice is the same at every turn of P (a later turn only adds tokens after it), and it is
  different from any other program's: ``key_i = (S, P, i)``. A block straddling the prefix/history boundary
  holds history tokens and so belongs to the program.

Hence ``key_i == key'_i`` iff the chained hashes would be equal (up to the negligible event of two programs
producing identical histories, which a token hash would share and this scheme does not). Computing a key is O(1)
and needs no tokens, so a turn's lookup costs O(blocks looked at). A program whose context is *not* append-only
(context compaction, a rewritten system prompt) must change identity at that point: pass
``program_id=(P, epoch)``.

Keyers are swappable: anything with ``key(block_idx) -> Hashable`` works (:class:`BlockKeyer`), e.g.
:class:`HashIdKeyer` for Mooncake-style traces that list per-block prefix hash ids.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

BlockKey: TypeAlias = Hashable
"""Identity of a full block's content *and* everything before it (a chained key). Equal keys = reusable KV."""


class BlockKeyer(Protocol):
    """Names the full blocks of one sequence. ``key(i)`` must depend only on the tokens ``[0, (i+1)*B)``."""

    def key(self, block_idx: int) -> BlockKey:
        """The chained key of block ``block_idx`` (0-based) of the sequence, valid once the block is full."""
        ...


@dataclass(frozen=True, slots=True)
class SegmentKeyer:
    """Structural keys for ``[shared prefix] + [program history]`` (see the module docstring for why).

    Attributes:
        prefix_id: id of the shared system prefix segment; None when the program shares no prefix.
        program_id: id of the program (its append-only history segment); never None.
        prefix_blocks: number of blocks lying entirely inside the shared prefix, i.e.
            ``prefix_tokens // block_size`` (blocks, not tokens).
    """

    prefix_id: Hashable | None
    program_id: Hashable
    prefix_blocks: int

    def __post_init__(self) -> None:
        if self.program_id is None:
            raise ValueError("program_id must not be None (None marks shared-prefix blocks)")
        if self.prefix_blocks < 0:
            raise ValueError(f"prefix_blocks must be >= 0, got {self.prefix_blocks}")
        if self.prefix_id is None and self.prefix_blocks:
            raise ValueError("prefix_blocks > 0 needs a prefix_id")

    @classmethod
    def for_program(
        cls, prefix_id: Hashable | None, prefix_tokens: int, program_id: Hashable, block_size: int = 16
    ) -> SegmentKeyer:
        """Keyer for a program whose context starts with ``prefix_tokens`` tokens of shared prefix ``prefix_id``."""
        if prefix_tokens < 0 or block_size <= 0:
            raise ValueError(f"need prefix_tokens >= 0 and block_size > 0, got {prefix_tokens}, {block_size}")
        return cls(prefix_id, program_id, prefix_tokens // block_size if prefix_id is not None else 0)

    def key(self, block_idx: int) -> BlockKey:
        if block_idx < self.prefix_blocks:
            return (self.prefix_id, None, block_idx)
        return (self.prefix_id, self.program_id, block_idx)


@dataclass(frozen=True, slots=True)
class HashIdKeyer:
    """Keys from a trace's per-block prefix hash ids (Mooncake ``hash_ids``), which must already be chained.

    Blocks past the listed ids (e.g. filled by decode) get ``("gen", owner, i)``: reusable only by a later
    sequence that uses the same ``owner`` and the same ids, which is what an append-only history implies.

    Attributes:
        hash_ids: chained id of each full block of the prompt, in order.
        owner: id of the history these blocks extend (program or request id).
    """

    hash_ids: Sequence[Hashable]
    owner: Hashable

    def key(self, block_idx: int) -> BlockKey:
        if block_idx < len(self.hash_ids):
            return self.hash_ids[block_idx]
        return ("gen", self.owner, block_idx)
