"""Hypothesis state machine for the KV block pool, checked against a naive list-based reference model.

A few programs (three sharing the prefix "sys", one with its own prefix) run turns on a small pool: admit (whole
prompt or a first prefill chunk), grow (decode or the next chunk), finish / preempt (free), hold (TTL-pin hook),
release a hold, and probe the prefix cache. After every step the pool must satisfy ``check_invariants()`` and
agree exactly with the reference model on free-queue order, ref counts, keys, hits and statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agentreplay.kv import BlockKeyer, BlockPool, SegmentKeyer

BS = 4


class RefPool:
    """The same semantics written the obvious O(n) way: Python lists for the free queue and each key's blocks."""

    def __init__(self, n: int, fresh_first: bool) -> None:
        self.ref = [0] * n
        self.key: list[object] = [None] * n
        self.free = list(range(n))
        self.cached: dict[object, list[int]] = {}
        self.seqs: dict[object, tuple[BlockKeyer, list[int], list[int]]] = {}  # keyer, ids, [num_tokens]
        self.fresh_first = fresh_first
        self.query = self.hit = 0

    def lookup(self, keyer: BlockKeyer, prompt: int) -> list[int]:
        hits: list[int] = []
        for i in range(max(0, (prompt - 1) // BS)):
            ids = self.cached.get(keyer.key(i))
            if not ids:
                break
            hits.append(ids[0])
        return hits

    def allocate(self, owner: object, keyer: BlockKeyer, prompt: int, n: int) -> bool:
        hits = self.lookup(keyer, prompt)
        need = -(-n // BS) - len(hits) + sum(self.ref[b] == 0 for b in hits)
        if need > len(self.free):
            return False
        for b in hits:
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1
        self.seqs[owner] = (keyer, list(hits), [len(hits) * BS])
        self.grow(owner, n)
        self.query += prompt
        self.hit += len(hits) * BS
        return True

    def grow(self, owner: object, total: int) -> bool:
        keyer, ids, ntok = self.seqs[owner]
        if -(-total // BS) - len(ids) > len(self.free):
            return False
        while len(ids) < -(-total // BS):
            b = self.free.pop(0)
            if self.key[b] is not None:
                self.cached[self.key[b]].remove(b)
                if not self.cached[self.key[b]]:
                    del self.cached[self.key[b]]
                self.key[b] = None
            self.ref[b] = 1
            ids.append(b)
        for i in range(ntok[0] // BS, total // BS):
            self.key[ids[i]] = keyer.key(i)
            self.cached.setdefault(keyer.key(i), []).append(ids[i])
        ntok[0] = total
        return True

    def release(self, ids: list[int]) -> None:
        fresh = []
        for b in reversed(ids):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if self.key[b] is None and self.fresh_first:
                    fresh.append(b)
                else:
                    self.free.append(b)
        self.free[:0] = fresh

    def hold(self, owner: object, holder: object) -> None:
        keyer, ids, ntok = self.seqs.pop(owner)
        full = ntok[0] // BS
        self.release(ids[full:])
        self.seqs[holder] = (keyer, ids[:full], [full * BS])


@dataclass
class Program:
    keyer: SegmentKeyer
    context_tokens: int = 0
    prompt_tokens: int = 0
    req: object = None
    holder: object = None
    turn: int = 0
    ever_keyed: set[int] = field(default_factory=set)


class PoolMachine(RuleBasedStateMachine):
    @initialize(
        num_blocks=st.integers(2, 14),
        fresh_first=st.booleans(),
        prefix_tokens=st.integers(0, 14),
    )
    def setup(self, num_blocks: int, fresh_first: bool, prefix_tokens: int) -> None:
        self.pool = BlockPool(num_blocks, BS, fresh_blocks_first=fresh_first)
        self.ref = RefPool(num_blocks, fresh_first)
        prefix = "sys" if prefix_tokens else None
        self.programs = [Program(self.pool.keyer(p, prefix, prefix_tokens)) for p in ("A", "B", "C")]
        self.programs.append(Program(self.pool.keyer("D", "other", 5)))
        self.keyed: set[object] = set()  # every key ever registered

    def _note_keys(self) -> None:
        for b in self.pool.blocks:
            if b.key is not None:
                self.keyed.add(b.key)

    @rule(p=st.integers(0, 3), obs=st.integers(1, 20), chunk=st.one_of(st.none(), st.integers(1, 20)))
    def admit(self, p: int, obs: int, chunk: int | None) -> None:
        prog = self.programs[p]
        if prog.req is not None:
            return
        prompt = prog.context_tokens + obs
        hit = self.pool.match_prefix(prog.keyer, prompt)
        n = prompt if chunk is None else hit * BS + min(chunk, prompt - hit * BS)
        rid = (p, prog.turn)
        prog.turn += 1
        ok = self.pool.allocate(rid, prog.keyer, prompt, n)
        assert ok == self.ref.allocate(rid, prog.keyer, prompt, n)
        if ok:
            assert self.pool.hit_blocks(rid) == hit
            prog.req, prog.context_tokens, prog.prompt_tokens = rid, n, prompt

    @rule(p=st.integers(0, 3), n=st.integers(0, 9))
    def grow(self, p: int, n: int) -> None:
        prog = self.programs[p]
        if prog.req is None:
            return
        ok = self.pool.append_tokens(prog.req, n)
        assert ok == self.ref.grow(prog.req, prog.context_tokens + n)
        if ok:
            prog.context_tokens += n

    @rule(p=st.integers(0, 3))
    def finish_or_preempt(self, p: int) -> None:
        prog = self.programs[p]
        if prog.req is None:
            return
        self.pool.free(prog.req)
        self.ref.release(self.ref.seqs.pop(prog.req)[1])
        prog.req = None

    @rule(p=st.integers(0, 3))
    def hold(self, p: int) -> None:
        prog = self.programs[p]
        if prog.req is None or prog.holder is not None:
            return
        holder = ("hold", p, prog.turn)
        self.pool.hold(prog.req, holder)
        self.ref.hold(prog.req, holder)
        prog.req, prog.holder = None, holder

    @precondition(lambda self: any(pr.holder is not None for pr in self.programs))
    @rule(p=st.integers(0, 3))
    def release_hold(self, p: int) -> None:
        prog = self.programs[p]
        if prog.holder is None:
            return
        self.pool.free(prog.holder)
        self.ref.release(self.ref.seqs.pop(prog.holder)[1])
        prog.holder = None

    @rule(p=st.integers(0, 3), extra=st.integers(1, 20))
    def probe(self, p: int, extra: int) -> None:
        prog = self.programs[p]
        prompt = prog.context_tokens + extra
        hit = self.pool.match_prefix(prog.keyer, prompt)
        assert hit == len(self.ref.lookup(prog.keyer, prompt))
        # A hit never exceeds what was cached: every hit block's key was registered at some point.
        assert all(prog.keyer.key(i) in self.keyed for i in range(hit))
        assert hit * BS < prompt

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "pool"):
            return
        pool, ref = self.pool, self.ref
        pool.check_invariants()
        self._note_keys()
        assert all(b.ref_cnt >= 0 for b in pool.blocks)
        free = pool.free_queue_ids()
        assert not any(pool.blocks[b].ref_cnt for b in free)  # never both free and referenced
        assert free == ref.free
        assert [b.ref_cnt for b in pool.blocks] == ref.ref
        assert [b.key for b in pool.blocks] == ref.key
        assert (pool.query_tokens, pool.hit_tokens) == (ref.query, ref.hit)
        assert pool.num_free_blocks + pool.num_used == pool.num_blocks
        for owner, (_, ids, _) in ref.seqs.items():
            assert list(pool.block_ids(owner)) == ids


PoolMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestPoolMachine = PoolMachine.TestCase
