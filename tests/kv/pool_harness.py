"""Harness of the differential test of SegmentPool, driven by the real Scheduler, against BlockPool (vLLM v1, block
by block): :class:`Harness` and its helpers, shared by the stateful test (``test_pool_equivalence.py``), the exact
scenarios (``test_pool_equivalence_scenarios.py``) and the known differences (``test_pool_known_differences.py``).

Both pools see the same agent-like operations: a program's next turn is admitted (append-only, or *divergent*:
its prompt reuses less than the previous context), possibly as a first prefill chunk; scheduler steps compute
prefill chunks and decode tokens for every running request (preempting the most recently admitted one when
blocks run out, as vLLM does); a turn finishes (optionally pinning its blocks through the tool gap, as the
retention "pin" action does, until the pin expires or the next turn is admitted) or is preempted by recompute
and re-admitted later.

The SegmentPool side goes through the real code paths: ``Scheduler._admit`` with a one-request waiting queue,
``Scheduler.schedule`` over the running requests, ``KVManager.free`` / ``Scheduler.preempt`` / ``free_partial`` /
``release_segments``. The BlockPool side mirrors vLLM: ``match_prefix`` / ``allocate`` at admission,
``append_tokens`` per scheduled request with the same preemption policy, ``free``, and ``hold`` for a pin. A
divergent turn gets a :class:`DivergedKeyer`: the old keys below the reuse point, a new identity
``(program, epoch)`` from there on.

After every operation the pools must agree on: admission success and the hit blocks found (also for refused
admissions), preemption victims, free blocks, cached free blocks (free blocks SegmentPool keeps in a segment
vs. free blocks whose BlockPool key is still reachable by some program's current keyer), each idle program's
cached chain length, and each running request's block count.

Excluded by construction (each has a ``test_known_difference_*`` in ``test_pool_known_differences.py``, an
expected failure):

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

from agentreplay.kv import BlockKeyer, BlockPool
from agentreplay.kv.manager import KVManager, held_blocks
from agentreplay.kv.segment_pool import Segment, SegmentPool
from agentreplay.request import Request
from agentreplay.scheduler.plan import StepPlan
from agentreplay.scheduler.scheduler import Scheduler

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
        self.sched = Scheduler(KVManager(self.sp), max_num_seqs=1000, max_num_batched_tokens=BIG)
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
            self.sched.kv.free_partial(r)
            prog.pin, prog.pin_owner = r, ("pin", p, prog.turn)
            self.bp.hold(prog.owner, prog.pin_owner)
        else:
            self.sched.kv.free(r)
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
        self.sched.kv.release_segments(prog.pin)
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


def run_turn(h: Harness, p: int, new: int, *, out: int = 1, reuse: int | None = None) -> int:
    """Admit program ``p``'s next turn whole, decode ``out`` tokens, finish it; returns the hit blocks."""
    ok, hit = h.admit(p, new, reuse=reuse)
    assert ok
    for _ in range(out - 1):
        h.step(BIG)
    h.finish(p)
    return hit
