"""The decode cohort of one instance: its running requests that decode one token per step, advanced lazily.

In every step the scheduler gives each decoding request exactly one token (vLLM v1 schedules running requests
first, a decode costs one token of the budget), so between joining and leaving the cohort a member's progress is
a function of the instance's step counter ``tick`` alone:

    computed = c_off + tick,    generated = g_off + tick.

The cohort keeps what a step needs from its members in O(1) instead of O(members):

- ``sum_ctx = s_off + n * tick``: the decode context sum the performance model prices (most pricers read decode
  contexts only through their count and sum, see :class:`agentreplay.perf.pricer.IterationPricer`; one that
  needs each context, like one-kernel mixed attention, gets ``c_off + tick`` of every member, in mixed iterations
  only);
- the blocks the next step allocates: a member needs a new KV block exactly when its ``computed`` is a multiple
  of the block size (it fills its last block), so members are counted by ``c_off mod block_size`` and the step
  at ``tick`` needs ``cross[-tick mod block_size]`` blocks;
- GPU time (:mod:`agentreplay.sim.gpu_time`): ``gpu_acc`` sums, over the cohort's steps, the GPU-seconds each
  member is charged in that step (its one token's share); a member records ``gpu_acc`` when it joins
  (``gpu_mark``) and adds ``gpu_acc - gpu_mark`` to its ``gpu_s`` when it leaves;
- who finishes: a member emits its last token at ``tick == target_out - g_off``; a heap ordered by that tick
  and by admission order (``run_seq``) yields the finishers of a step in the running list's order, as
  ``Instance`` emits them step by step.

A member's ``computed`` and ``generated`` fields are stale while it is in the cohort: :meth:`sync` refreshes them
(for readers outside the step loop, e.g. a router reading outstanding tokens), :meth:`dissolve` refreshes them
and empties the cohort (before the scheduler's general path, which may preempt).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from agentreplay.request import Request


class DecodeCohort:
    """Lazily advanced decoding requests of one instance (see the module docstring)."""

    __slots__ = ("bs", "cross", "gpu_acc", "heap", "n", "s_off", "tick")

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        self.tick = 0  #: decode steps the cohort has taken on this instance
        self.n = 0  #: members
        self.s_off = 0  #: sum of the members' c_off
        self.cross = [0] * block_size  #: members by c_off mod block size
        self.heap: list[tuple[int, int, Request]] = []  #: (finish tick, run_seq, request)
        self.gpu_acc = 0.0  #: GPU-seconds charged per member over the cohort's steps (see the module docstring)

    @property
    def sum_ctx(self) -> int:
        """Sum of the members' computed tokens (the decode context of the next step)."""
        return self.s_off + self.n * self.tick

    def join(self, r: Request) -> None:
        """Add a decoding request (``computed == prompt + generated - 1``, ``1 <= generated < target_out``)."""
        assert r.generated >= 1 and r.computed == r.prompt + r.generated - 1 < r.prompt + r.target_out - 1, (
            "only a decoding request that has not finished joins the cohort"
        )
        assert r.computed >= r.base * self.bs, "a decoding request holds its whole shared prefix"
        t = self.tick
        r.c_off = c = r.computed - t
        r.g_off = r.generated - t
        r.lazy = True
        r.gpu_mark = self.gpu_acc
        self.n += 1
        self.s_off += c
        self.cross[c % self.bs] += 1
        heapq.heappush(self.heap, (r.target_out - r.g_off, r.run_seq, r))

    def sync(self, members: Iterable[Request]) -> None:
        """Refresh ``computed`` and ``generated`` of the members among ``members``."""
        t = self.tick
        for r in members:
            if r.lazy:
                r.computed = r.c_off + t
                r.generated = r.g_off + t

    def dissolve(self, members: Sequence[Request]) -> None:
        """Refresh every member (all of them must be in ``members``) and empty the cohort."""
        self.sync(members)
        acc = self.gpu_acc
        for r in members:
            if r.lazy:
                r.lazy = False
                r.gpu_s += acc - r.gpu_mark
                self.n -= 1
        assert self.n == 0, "dissolve: members missing from the given requests"
        self.s_off = 0
        self.cross = [0] * self.bs
        self.heap = []

    def need(self) -> int:
        """KV blocks the next step allocates for the members."""
        return self.cross[-self.tick % self.bs] if self.n else 0

    def crossings(self, first: int, steps: int) -> int:
        """KV blocks the ``steps`` steps after the next ``first`` ones allocate (members unchanged)."""
        if steps <= 0 or not self.n:
            return 0
        full, rem = divmod(steps, self.bs)
        total = full * self.n
        t0, cross, bs = self.tick + first, self.cross, self.bs
        for j in range(rem):
            total += cross[-(t0 + j) % bs]
        return total

    def steps_within(self, first: int, free: int, limit: int) -> int:
        """The most steps ``s <= limit`` after the next ``first`` ones whose blocks fit ``free`` blocks, i.e. the
        largest ``s`` with ``crossings(first, s) <= free`` (members unchanged). Every ``bs`` consecutive steps
        allocate exactly ``n`` blocks (each member crosses once), so whole cycles are counted at once and at most
        one cycle is walked."""
        n, bs, cross = self.n, self.bs, self.cross
        if not n or limit <= 0:
            return max(limit, 0)
        cycles = free // n
        s = cycles * bs
        if s >= limit:
            return limit
        left = free - cycles * n
        t = self.tick + first + s
        while s < limit:
            c = cross[-t % bs]
            if c > left:
                break
            left -= c
            s += 1
            t += 1
        return s

    def steps_to_finish(self) -> int:
        """Steps until the first member emits its last token (that step included); members must exist."""
        return self.heap[0][0] - self.tick

    def advance(self, steps: int) -> list[Request]:
        """Take ``steps`` steps (no more than :meth:`steps_to_finish`); returns the members that finished, in
        admission order, refreshed and out of the cohort."""
        self.tick = t = self.tick + steps
        heap = self.heap
        done: list[Request] = []
        while heap and heap[0][0] <= t:
            f, _, r = heapq.heappop(heap)
            assert f == t, "a cohort member stepped past its last token"
            r.computed = r.c_off + t
            r.generated = r.g_off + t
            r.lazy = False
            r.gpu_s += self.gpu_acc - r.gpu_mark
            self.n -= 1
            self.s_off -= r.c_off
            self.cross[r.c_off % self.bs] -= 1
            done.append(r)
        return done
