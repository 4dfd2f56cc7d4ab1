"""LRU queue of free KV block ids with O(1) removal from the middle.

Same role and order as vLLM v1's ``FreeKVCacheBlockQueue`` (vllm/v1/core/kv_cache_utils.py): an intrusive doubly
linked list, so popping the head, appending at the tail and unlinking a block that a prefix hit revives are all
O(1) with no allocation. Here the links are two int arrays indexed by block id instead of pointers on block
objects, with one sentinel slot (index ``num_blocks``) closing the ring, which removes every head/tail branch.

Order: the head is the next block handed out (least recently freed), the tail the most recently freed. Initially
the queue holds ``0 .. num_blocks-1`` in id order.
"""

from __future__ import annotations

from collections.abc import Iterator


class FreeBlockQueue:
    """Doubly linked ring over block ids ``0..n-1`` plus sentinel ``n``.

    Invariants: ``len(self)`` equals the number of ids linked in the ring; ``self._in[b]`` is 1 iff block ``b``
    is linked; following ``next`` from the sentinel visits every linked id once and returns to the sentinel.
    """

    __slots__ = ("_in", "_len", "_next", "_prev", "_sentinel")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        s = num_blocks
        self._sentinel = s
        # next[i] = i + 1 and prev[i] = i - 1, closed into a ring through the sentinel s.
        self._next = [*range(1, num_blocks + 1), 0 if num_blocks else s]
        self._prev = [*range(-1, num_blocks - 1), num_blocks - 1 if num_blocks else s]
        self._prev[0] = s
        self._in = bytearray([1]) * num_blocks
        self._len = num_blocks

    def __len__(self) -> int:
        return self._len

    def __contains__(self, block_id: int) -> bool:
        return bool(self._in[block_id])

    def __iter__(self) -> Iterator[int]:
        """Head to tail. O(len); for tests and diagnostics, never on a hot path."""
        nxt, s = self._next, self._sentinel
        b = nxt[s]
        while b != s:
            yield b
            b = nxt[b]

    def peek(self) -> int:
        """The id ``popleft`` would return. Raises IndexError when empty."""
        if not self._len:
            raise IndexError("free queue is empty")
        return self._next[self._sentinel]

    def popleft(self) -> int:
        """Unlink and return the head (least recently freed). Raises IndexError when empty."""
        if not self._len:
            raise IndexError("free queue is empty")
        nxt, prv, s = self._next, self._prev, self._sentinel
        b = nxt[s]
        n = nxt[b]
        nxt[s] = n
        prv[n] = s
        self._in[b] = 0
        self._len -= 1
        return b

    def popleft_n(self, n: int) -> list[int]:
        """Unlink and return the first ``n`` ids in queue order (one relink, like vLLM's ``popleft_n``)."""
        if n > self._len:
            raise IndexError(f"asked for {n} blocks, {self._len} free")
        nxt, flags, s = self._next, self._in, self._sentinel
        out = [0] * n
        b = nxt[s]
        for i in range(n):
            out[i] = b
            flags[b] = 0
            b = nxt[b]
        nxt[s] = b
        self._prev[b] = s
        self._len -= n
        return out

    def remove(self, block_id: int) -> None:
        """Unlink ``block_id`` from anywhere in the queue. Raises KeyError if it is not queued."""
        if not self._in[block_id]:
            raise KeyError(f"block {block_id} is not in the free queue")
        nxt, prv = self._next, self._prev
        p, n = prv[block_id], nxt[block_id]
        nxt[p] = n
        prv[n] = p
        self._in[block_id] = 0
        self._len -= 1

    def append(self, block_id: int) -> None:
        """Link ``block_id`` at the tail (evicted last). Raises KeyError if already queued."""
        self._link_between(self._prev[self._sentinel], self._sentinel, block_id)

    def extend(self, block_ids: list[int]) -> None:
        """Append ``block_ids`` at the tail in order (vLLM's ``append_n``). None may be queued already."""
        nxt, prv, flags, s = self._next, self._prev, self._in, self._sentinel
        p = prv[s]
        for b in block_ids:
            if flags[b]:
                raise KeyError(f"block {b} is already in the free queue")
            flags[b] = 1
            nxt[p] = b
            prv[b] = p
            p = b
        nxt[p] = s
        prv[s] = p
        self._len += len(block_ids)

    def appendleft(self, block_id: int) -> None:
        """Link ``block_id`` at the head (handed out next). Raises KeyError if already queued."""
        self._link_between(self._sentinel, self._next[self._sentinel], block_id)

    def _link_between(self, p: int, n: int, block_id: int) -> None:
        if self._in[block_id]:
            raise KeyError(f"block {block_id} is already in the free queue")
        nxt, prv = self._next, self._prev
        nxt[p] = block_id
        prv[block_id] = p
        nxt[block_id] = n
        prv[n] = block_id
        self._in[block_id] = 1
        self._len += 1
