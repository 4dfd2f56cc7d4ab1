"""Differential test: SegmentPool driven by the real Scheduler against BlockPool (vLLM v1, block by block).

Both pools see the same agent-like operations: a program's next turn is admitted (append-only, or *divergent*:
its prompt reuses less than the previous context), possibly as a first prefill chunk; scheduler steps compute
prefill chunks and decode tokens for every running request (preempting the most recently admitted one when
blocks run out, as vLLM does); a turn finishes (optionally pinning its blocks through the tool gap, as the
retention "pin" action does, until the pin expires or the next turn is admitted) or is preempted by recompute
and re-admitted later.

The SegmentPool side goes through the real code paths: ``Scheduler._admit`` with a one-request waiting queue,
``Scheduler.schedule`` over the running requests, ``Scheduler.release`` / ``preempt`` / ``free_partial`` /
``release_segments``. The BlockPool side mirrors vLLM: ``match_prefix`` / ``allocate`` at admission,
``append_tokens`` per scheduled request with the same preemption policy, ``free``, and ``hold`` for a pin. A
divergent turn gets a :class:`DivergedKeyer`: the old keys below the reuse point, a new identity
``(program, epoch)`` from there on.

After every operation the pools must agree on: admission success and the hit blocks found (also for refused
admissions), preemption victims, free blocks, cached free blocks (free blocks SegmentPool keeps in a segment
vs. free blocks whose BlockPool key is still reachable by some program's current keyer), each idle program's
cached chain length, and each running request's block count.

Excluded by construction (each has a ``test_known_difference_*`` below, an expected failure):

- a first prefill chunk that does not cover the shared prefix: the scheduler allocates all prefix blocks of the
  shared segment at admission (``held_blocks`` is at least ``base``) and counts them as cached, while vLLM
  allocates and registers only the blocks of the chunk;
- a hit ended by the ``max_hit`` cap inside cached blocks (a prompt that is exactly the block-aligned shared
  prefix; a block-aligned divergent prompt made only of reused tokens): vLLM recomputes the capped block into
  a duplicate and the original stays cached (and is what later lookups return); a segment cannot hold two
  copies, so SegmentPool makes the original anonymous. Free counts agree; cached counts and, later, the
  eviction order differ by that block.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from agentreplay.kv import BlockKeyer, BlockPool
from agentreplay.kv.segment_pool import Segment, SegmentPool
from agentreplay.sim.request import Request
from agentreplay.sim.scheduler import Scheduler, StepPlan, held_blocks

BS = 4
BIG = 1 << 30


@dataclass(frozen=True, slots=True)
class DivergedKeyer:
    """Keys of a program whose context was rewritten from block ``split`` on: the tokens ``[0, split * BS)``
    are unchanged (old chained keys), every later block has the new identity."""

    old: BlockKeyer
    split: int
    new: BlockKeyer

    def key(self, block_idx: int) -> Hashable:
        return self.old.key(block_idx) if block_idx < self.split else self.new.key(block_idx)


@dataclass(eq=False)
class Prog:
    idx: int
    name: str
    prefix_id: str | None
    prefix_tokens: int
    keyer: BlockKeyer
    pfx: Segment | None
    seg: Segment
    base: int
    context: int = 0  #: tokens of the last finished turn's stream (prompt + output): the next turn's reuse
    epoch: int = 0
    turn: int = 0
    attempts: int = 0
    req: Request | None = None
    owner: Hashable = None  #: BlockPool owner id of the request while it holds blocks
    preempted: bool = False
    pin: Request | None = None  #: finished call whose blocks are pinned through the tool gap
    pin_owner: Hashable = None  #: its BlockPool holder

    @property
    def running(self) -> bool:
        return self.req is not None and not self.preempted


class Harness:
    """Two pools, one scheduler (over the SegmentPool) and the programs; every method checks agreement."""

    def __init__(
        self,
        num_blocks: int,
        prefix_tokens: int,
        *,
        shared: int = 3,
        private: bool = True,
        fresh_blocks_first: bool = True,
    ) -> None:
        self.bp = BlockPool(num_blocks, BS, fresh_blocks_first=fresh_blocks_first)
        self.sp = SegmentPool(num_blocks, BS, fresh_blocks_first=fresh_blocks_first)
        self.sched = Scheduler(self.sp, max_num_seqs=1000, max_num_batched_tokens=BIG)
        self.progs: list[Prog] = []
        self.running: list[Prog] = []  # admission order, mirrors sched.running
        self.checking = True  # check agreement after every operation
        specs = [("sys", prefix_tokens)] * shared + ([(None, 0)] if private else [])
        for i, (pid, ptok) in enumerate(specs):
            name = "ABCDEFGH"[i]
            # Segments exactly as Orchestrator._segments builds them.
            base = ptok // BS
            pfx = self.sp.segment(("prefix", pid, base), 0) if pid is not None and base > 0 else None
            if pfx is None:
                base = 0
            seg = self.sp.segment(("prog", i), base)
            self.progs.append(Prog(i, name, pid, ptok, self.bp.keyer(name, pid, ptok), pfx, seg, base))

    # ---- helpers -------------------------------------------------------------------------------------
    def seg_hit(self, r: Request) -> int:
        """The hit ``Scheduler._admit`` computes (replicated so a refused admission can be compared too; a
        successful one checks the replica against the real code)."""
        bs, total = BS, r.total_tokens
        max_hit = (total - 1) // bs
        pfx_hit = prog_hit = 0
        if r.pfx is not None:
            pfx_hit = max(0, min(r.pfx.present, r.base, max_hit))
        if pfx_hit == r.base:
            bound = min(max_hit, total // bs if r.admitted else r.reuse // bs)
            prog_hit = self.sp.hit_blocks(r.prog, bound)
        return pfx_hit + prog_hit

    def live(self, key: Hashable) -> bool:
        """True when some program's current keyer still names ``key`` (structural keys end with the index)."""
        i = key[2]  # type: ignore[index]
        return any(p.keyer.key(i) == key for p in self.progs)

    def turn_shape(self, p: int, new_tokens: int, reuse: int | None) -> tuple[int, int]:
        """(prompt, reuse) of program ``p``'s next turn: ``new_tokens`` after the reused context (all of it
        unless ``reuse`` is smaller), or after the shared prefix on a first turn."""
        prog = self.progs[p]
        reuse = prog.context if reuse is None or reuse >= prog.context else max(reuse, prog.prefix_tokens)
        return max(max(reuse, prog.prefix_tokens) + new_tokens, 1), reuse

    # ---- operations ----------------------------------------------------------------------------------
    def admit(
        self,
        p: int,
        new_tokens: int = 0,
        budget: int | None = None,
        reuse: int | None = None,
    ) -> tuple[bool, int]:
        """Admit program ``p``'s next turn (or re-admit its preempted request) with a token budget; returns
        (admitted, hit blocks). A refused new turn is dropped (both pools unchanged)."""
        prog = self.progs[p]
        assert not prog.running
        budget = BIG if budget is None else budget
        if prog.preempted:
            r, keyer = prog.req, prog.keyer
            assert r is not None
        else:
            prompt, reuse = self.turn_shape(p, new_tokens, reuse)
            keyer = prog.keyer
            if reuse < prog.context:  # divergent turn: history past the reuse point is rewritten
                new = self.bp.keyer((prog.name, prog.epoch + 1), prog.prefix_id, prog.prefix_tokens)
                keyer = DivergedKeyer(prog.keyer, reuse // BS, new)
            r = Request(
                turn=prog.turn,
                program=p,
                turn_idx=prog.turn,
                prompt=prompt,
                target_out=BIG,
                reuse=reuse,
                pfx=prog.pfx,
                prog=prog.seg,
                base=prog.base,
                release_s=0.0,
            )
        # SegmentPool through the real admission code.
        want_hit = self.seg_hit(r)
        assert not self.sched.waiting
        self.sched.waiting.append(r)
        plan = StepPlan()
        self.sched._admit(plan, budget)
        ok = bool(plan.admitted)
        hit_tokens = r.computed
        self.sched.waiting.clear()
        # BlockPool, as vLLM's get_computed_blocks + allocate_slots.
        total = r.total_tokens
        hit = self.bp.match_prefix(keyer, total)
        n = min(total - hit * BS, budget)
        owner = (p, prog.turn, prog.attempts)
        ok_b = self.bp.allocate(owner, keyer, total, hit * BS + n)
        assert want_hit == hit, f"hit: SegmentPool {want_hit}, BlockPool {hit}"
        assert ok == ok_b, f"admission: SegmentPool {ok}, BlockPool {ok_b}"
        if ok:
            assert hit_tokens == hit * BS and plan.prefill == [(r, n, hit * BS)]
            if keyer is not prog.keyer:
                prog.keyer, prog.epoch = keyer, prog.epoch + 1
            prog.req, prog.owner, prog.preempted = r, owner, False
            prog.attempts += 1
            self.running.append(prog)
            self._compute(r, n)
            if prog.pin is not None:  # Residency.consume_pin: the new call holds its own references now
                self.unpin(p)
        self.check()
        return ok, hit

    @staticmethod
    def _compute(r: Request, n: int) -> None:
        """Apply a scheduled chunk as Instance._complete does (the last prompt token emits one)."""
        r.computed += n
        if r.computed == r.total_tokens:
            r.generated += 1

    def step(self, budget: int) -> list[int]:
        """One scheduler step over the running requests (no admission); returns the preempted programs."""
        # BlockPool, vLLM's running loop: allocate each request's slots, preempting the last-admitted on failure.
        order = list(self.running)
        scheduled: list[tuple[int, int]] = []
        victims: list[Prog] = []
        left, i = budget, 0
        while i < len(order) and left > 0:
            prog = order[i]
            r = prog.req
            assert r is not None
            n = min(r.total_tokens - r.computed, left)
            self_preempted = False
            while not self.bp.append_tokens(prog.owner, n):
                victim = order.pop()
                self.bp.free(victim.owner)
                victims.append(victim)
                if victim is prog:
                    self_preempted = True
                    break
            if self_preempted:
                break
            scheduled.append((prog.idx, n))
            left -= n
            i += 1
        # SegmentPool through the real Scheduler.schedule.
        self.sched.max_num_batched_tokens = budget
        plan = self.sched.schedule()
        assert not plan.admitted
        assert [r.program for r in plan.preempted] == [v.idx for v in victims], "preemption victims differ"
        got = sorted([(r.program, n) for r, n, _ in plan.prefill] + [(r.program, 1) for r in plan.decode])
        assert got == sorted(scheduled), f"scheduled: SegmentPool {got}, BlockPool {scheduled}"
        for r, n, _ in plan.prefill:
            self._compute(r, n)
        for r in plan.decode:
            self._compute(r, 1)
        assert list(self.sched.waiting) == list(reversed(plan.preempted))
        self.sched.waiting.clear()
        for v in victims:
            v.preempted = True
            self.running.remove(v)
        self.check()
        return [v.idx for v in victims]

    def finish(self, p: int, pin: bool = False) -> None:
        """End of turn: free everything, or with ``pin`` everything but the full blocks (Instance's retention
        "pin": ``free_partial`` now, ``release_segments`` at unpin; BlockPool ``hold``). The program's context
        becomes the turn's prompt + output."""
        prog = self.progs[p]
        r = prog.req
        assert prog.running and r is not None and r.generated >= 1 and prog.pin is None
        self.sched.running.remove(r)
        if pin:
            self.sched.free_partial(r)
            prog.pin, prog.pin_owner = r, ("pin", p, prog.turn)
            self.bp.hold(prog.owner, prog.pin_owner)
        else:
            self.sched.release(r)
            self.bp.free(prog.owner)
        prog.context = r.total_tokens
        prog.req = prog.owner = None
        prog.turn += 1
        prog.attempts = 0
        self.running.remove(prog)
        self.check()

    def unpin(self, p: int) -> None:
        """A pin ends (TTL expiry, memory pressure, or the program's next call was admitted)."""
        prog = self.progs[p]
        assert prog.pin is not None
        self.sched.release_segments(prog.pin)
        self.bp.free(prog.pin_owner)
        prog.pin = prog.pin_owner = None
        self.check()

    def preempt(self, p: int) -> None:
        """Recompute preemption: free everything; re-admission recomputes prompt + output so far."""
        prog = self.progs[p]
        r = prog.req
        assert prog.running and r is not None
        self.sched.preempt(r)
        assert list(self.sched.waiting) == [r]
        self.sched.waiting.clear()
        self.bp.free(prog.owner)
        prog.preempted = True
        prog.owner = None
        self.running.remove(prog)
        self.check()

    # ---- agreement -----------------------------------------------------------------------------------
    def cached_free(self) -> tuple[int, int]:
        """(SegmentPool, BlockPool) free blocks that a later request can still hit."""
        sp = sum(run.count for run in self.sp.queue.runs() if run.seg is not None)
        blocks = self.bp.blocks
        bp = sum(1 for b in self.bp.free_queue_ids() if blocks[b].key is not None and self.live(blocks[b].key))
        return sp, bp

    def chain(self, prog: Prog) -> tuple[int, int]:
        """(SegmentPool, BlockPool) leading cached blocks of an idle program's context."""
        if prog.pfx is not None and prog.pfx.present < prog.base:
            sp = prog.pfx.present
        else:
            sp = prog.base + prog.seg.present - prog.seg.base
        return sp, self.bp.match_prefix(prog.keyer, BIG)

    def check(self) -> None:
        if not self.checking:
            return
        self.bp.check_invariants()
        self.sp.check()
        for prog in self.running:
            r = prog.req
            assert r is not None
            assert self.bp.num_tokens(prog.owner) == r.computed
            assert len(self.bp.block_ids(prog.owner)) == held_blocks(r.computed, r.base, BS)
        assert [p.req for p in self.running] == self.sched.running
        assert self.sp.free_blocks == self.bp.num_free_blocks, (
            f"free blocks: SegmentPool {self.sp.free_blocks}, BlockPool {self.bp.num_free_blocks}"
        )
        sp, bp = self.cached_free()
        assert sp == bp, f"cached free blocks: SegmentPool {sp}, BlockPool {bp}"
        for prog in self.progs:
            if not prog.running:
                sp, bp = self.chain(prog)
                assert sp == bp, f"program {prog.name} cached chain: SegmentPool {sp}, BlockPool {bp}"


# ------------------------------------------------------------------------------------ stateful test
class EquivalenceMachine(RuleBasedStateMachine):
    """Random agent traffic on a small pool: 3 programs share prefix "sys", one has no prefix."""

    h: Harness

    @initialize(num_blocks=st.integers(3, 24), prefix_tokens=st.integers(0, 14), fresh_first=st.booleans())
    def setup(self, num_blocks: int, prefix_tokens: int, fresh_first: bool) -> None:
        self.h = Harness(num_blocks, prefix_tokens, fresh_blocks_first=fresh_first)

    @rule(
        p=st.integers(0, 3),
        new=st.integers(0, 12),
        budget=st.one_of(st.none(), st.integers(1, 24)),
        diverge=st.one_of(st.none(), st.integers(0, 1000)),
    )
    def admit(self, p: int, new: int, budget: int | None, diverge: int | None) -> None:
        prog = self.h.progs[p]
        if prog.running:
            return
        if budget is not None:
            budget = max(budget, prog.prefix_tokens)  # the first chunk covers the shared prefix (see module doc)
        reuse = None
        if diverge is not None and not prog.preempted and prog.context > prog.prefix_tokens:
            reuse = prog.prefix_tokens + diverge % (prog.context - prog.prefix_tokens)
        if not prog.preempted:
            prompt, reuse = self.h.turn_shape(p, new, reuse)
            # Exclude the cases where the max_hit cap (not the content) ends the hit inside cached blocks
            # (see test_known_difference_*): a prompt that is exactly the block-aligned shared prefix, or a
            # block-aligned prompt made only of reused tokens of a divergent turn.
            if prompt % BS == 0 and (prompt == prog.base * BS > 0 or (prompt == reuse < prog.context)):
                new = prompt - reuse + 1
        kind = "readmit" if prog.preempted else "divergent" if reuse is not None and reuse < prog.context else "turn"
        ok, hit = self.h.admit(p, new, budget, reuse)
        event(f"admit {kind}: {'ok' if ok else 'refused'}{', hit' if hit else ''}")

    @rule(budget=st.integers(1, 24))
    def step(self, budget: int) -> None:
        if self.h.running and self.h.step(budget):
            event("step: preemption")

    @rule(p=st.integers(0, 3), pin=st.booleans())
    def finish(self, p: int, pin: bool) -> None:
        prog = self.h.progs[p]
        if prog.running and prog.req is not None and prog.req.generated >= 1:
            self.h.finish(p, pin)

    @rule(p=st.integers(0, 3))
    def unpin(self, p: int) -> None:
        if self.h.progs[p].pin is not None:
            self.h.unpin(p)

    @rule(p=st.integers(0, 3))
    def preempt(self, p: int) -> None:
        if self.h.progs[p].running:
            self.h.preempt(p)

    @invariant()
    def agree(self) -> None:
        if hasattr(self, "h"):
            self.h.check()


EquivalenceMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestEquivalenceMachine = EquivalenceMachine.TestCase


# ------------------------------------------------------------------------------------ exact scenarios
def run_turn(h: Harness, p: int, new: int, *, out: int = 1, reuse: int | None = None) -> int:
    """Admit program ``p``'s next turn whole, decode ``out`` tokens, finish it; returns the hit blocks."""
    ok, hit = h.admit(p, new, reuse=reuse)
    assert ok
    for _ in range(out - 1):
        h.step(BIG)
    h.finish(p)
    return hit


def test_programs_share_the_prefix() -> None:
    h = Harness(16, prefix_tokens=8, shared=2, private=False)  # prefix: blocks 0-1
    assert run_turn(h, 0, 5, out=3) == 0  # A: 13 + 3 tokens, 15 computed: 3 full blocks + partial
    assert (h.sp.free_blocks, h.cached_free()) == (16, (3, 3))
    assert h.admit(1, 6) == (True, 2)  # B hits both prefix blocks, not A's history
    assert h.bp.num_free_blocks == 16 - 4 and h.cached_free() == (1, 1)  # A's block 2 stays cached free
    h.step(BIG)
    h.finish(1)
    assert h.chain(h.progs[0]) == (3, 3) and h.chain(h.progs[1]) == (3, 3)


def test_pressure_evicts_the_tail_of_a_history_first() -> None:
    h = Harness(8, prefix_tokens=4, shared=2, private=False)  # prefix: block 0
    run_turn(h, 0, 16, out=5)  # A: 20 + 5 tokens, 24 computed: 6 full blocks, 2 blocks never used
    assert h.chain(h.progs[0]) == (6, 6)
    assert h.admit(1, 16) == (True, 1)  # B: 20 tokens, hits block 0; 4 new: 2 empty, then A's top 2 blocks
    assert h.chain(h.progs[0]) == (4, 4)  # A's history was freed tail first, so its top is evicted first
    assert h.admit(0, 3) == (False, 4)  # A's 28-token turn: 3 new blocks + 3 evictable hits > 3 free
    h.finish(1)
    assert h.admit(0, 3) == (True, 4)
    assert h.sp.free_blocks == h.bp.num_free_blocks == 8 - 7


def test_divergent_turn_invalidates_history_past_the_reuse_point() -> None:
    h = Harness(16, prefix_tokens=4, shared=1, private=False)
    run_turn(h, 0, 20, out=4)  # 24 + 4 tokens, 27 computed: 6 full blocks
    assert h.cached_free() == (6, 6)
    # The next prompt keeps only 10 tokens of the context (compaction): blocks 0-1 still hit, 2-5 are stale.
    assert h.admit(0, 6, reuse=10) == (True, 2)
    assert h.cached_free() == (0, 0)
    assert h.sp.free_blocks == h.bp.num_free_blocks == 16 - 4
    h.step(BIG)
    h.finish(0)
    assert h.chain(h.progs[0]) == (4, 4)  # 18 tokens: blocks 0-3 under the new identity


def test_preempted_request_hits_its_own_blocks() -> None:
    h = Harness(8, prefix_tokens=4, shared=2, private=False)
    assert h.admit(0, 10) == (True, 0)  # A: 14 tokens, 4 blocks
    for _ in range(5):
        h.step(BIG)  # A decodes to 19 computed: 5 blocks
    assert h.admit(1, 14, budget=8) == (True, 1)  # B: 18 tokens, hits the prefix, first chunk of 8: 3 blocks
    assert h.step(BIG) == [1]  # B needs 2 more blocks, 1 is free: B (the last admitted) is preempted
    assert h.sp.free_blocks == h.bp.num_free_blocks == 3
    assert h.admit(1) == (False, 3)  # prefix + B's 2 computed blocks hit, but 2 new + 2 evictable > 3 free
    h.preempt(0)
    assert h.admit(1) == (True, 3)
    h.finish(1)
    assert h.admit(0) == (True, 4)  # A's 20-token stream, 19 computed: its 4 full blocks hit


@pytest.mark.xfail(
    raises=AssertionError,
    strict=True,
    reason="documented approximation: the scheduler allocates the whole shared prefix at admission",
)
def test_known_difference_first_chunk_shorter_than_prefix() -> None:
    h = Harness(16, prefix_tokens=12, shared=1, private=False)  # prefix: blocks 0-2
    h.admit(0, 4, budget=4)  # vLLM allocates 1 block (and caches 1); the scheduler allocates (and caches) 3


@pytest.mark.xfail(
    raises=AssertionError,
    strict=True,
    reason="segment model: a hit capped by max_hit marks the cached blocks past it stale",
)
def test_known_difference_prompt_is_the_block_aligned_prefix() -> None:
    h = Harness(16, prefix_tokens=8, shared=2, private=False)  # prefix: blocks 0-1
    run_turn(h, 0, 0)  # A's prompt is the prefix: the prefix is cached
    # B's prompt is the prefix too: vLLM hits block 0 (the last token is recomputed), allocates a duplicate of
    # block 1 and leaves the original cached; SegmentPool turns the original into an anonymous free block.
    h.admit(1, 0)


@pytest.mark.xfail(
    raises=AssertionError,
    strict=True,
    reason="segment model: a hit capped by max_hit marks the cached blocks past it stale",
)
def test_known_difference_divergent_prompt_made_of_reused_tokens() -> None:
    h = Harness(16, prefix_tokens=4, shared=1, private=False)
    run_turn(h, 0, 20, out=4)  # 27 computed: 6 full blocks
    # The next prompt is the first 16 tokens of the context: vLLM hits 3 blocks, recomputes block 3 into a
    # duplicate and keeps the original cached; SegmentPool marks the original (and blocks 4-5) stale.
    h.admit(0, 0, reuse=16)


def test_prompt_equal_to_the_held_prefix_does_not_leak() -> None:
    """Fixed: a request whose hit stopped inside a shared prefix held by another request allocated the
    prefix's last block again, and no release ever freed it (a block lost for good per such admission)."""
    h = Harness(16, prefix_tokens=8, shared=2, private=False)  # prefix: blocks 0-1
    assert h.admit(0, 0) == (True, 0)  # A's prompt is the prefix; A holds it
    # B's prompt is the prefix too: it hits block 0 only (the last prompt token is recomputed) and computes
    # block 1 again into a new block (vLLM: a duplicate; A still holds the original).
    assert h.admit(1, 0) == (True, 1)
    assert h.sp.free_blocks == h.bp.num_free_blocks == 16 - 3
    h.checking = False
    h.finish(1)  # vLLM frees B's duplicate, which stays cached (a 2nd copy of block 1); SegmentPool: anonymous
    assert h.sp.free_blocks == h.bp.num_free_blocks == 16 - 2
    assert h.cached_free() == (0, 1)
    h.finish(0)
    assert h.sp.free_blocks == h.bp.num_free_blocks == 16  # before the fix SegmentPool kept 1 block used
    assert h.cached_free() == (2, 3)
    assert h.chain(h.progs[0]) == h.chain(h.progs[1]) == (2, 2)


def test_prefix_caching_off_frees_every_block() -> None:
    """Fixed: with prefix caching off every admission allocated the whole prefix again, but only the last
    holder of the shared prefix segment freed it, so each overlap of two requests leaked ``base`` blocks."""
    sp = SegmentPool(32, BS)
    sched = Scheduler(sp, max_num_seqs=8, max_num_batched_tokens=BIG, enable_prefix_caching=False)
    pfx = sp.segment(("prefix", "sys", 2), 0)
    reqs = [
        Request(
            turn=p,
            program=p,
            turn_idx=0,
            prompt=10,
            target_out=1,
            reuse=0,
            pfx=pfx,
            prog=sp.segment(("prog", p), 2),
            base=2,
            release_s=0.0,
        )
        for p in range(2)
    ]
    sched.waiting.extend(reqs)
    plan = sched.schedule()
    assert plan.admitted == reqs
    for r, n, _ in plan.prefill:
        r.computed += n
    for r in reqs:
        sched.running.remove(r)
        sched.release(r)
    sp.check(held_by_requests=0)
    assert sp.free_blocks == 32


def test_divergent_turn_of_a_pinned_program() -> None:
    """Fixed: when the program's history was pinned (or held by an offload write), ``touch`` kept the blocks
    past the new hit in the segment: the pin's release then freed nothing for them (leak) and the segment
    claimed the old, now wrong, blocks as the new history's cache (false hits)."""
    h = Harness(16, prefix_tokens=4, shared=1, private=False)
    assert h.admit(0, 20) == (True, 0)  # 24 tokens
    for _ in range(3):
        h.step(BIG)  # 27 computed: 6 full blocks + a partial one
    h.finish(0, pin=True)  # the partial block is freed, the 6 full blocks stay held
    assert h.sp.free_blocks == h.bp.num_free_blocks == 10
    assert h.admit(0, 6, reuse=10) == (True, 2)  # the pin is consumed: blocks 2-5 are freed, 0-1 reused
    assert h.sp.free_blocks == h.bp.num_free_blocks == 16 - 4
    h.step(BIG)
    h.finish(0)
    assert h.chain(h.progs[0]) == (4, 4)
    assert h.sp.free_blocks == h.bp.num_free_blocks == 16
