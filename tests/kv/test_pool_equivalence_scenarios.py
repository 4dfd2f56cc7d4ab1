"""Differential test, exact scenarios: SegmentPool (through the real Scheduler) against BlockPool (vLLM v1) on
hand-written agent traffic (:mod:`tests.kv.pool_harness`), and the regressions of fixed leaks."""

from __future__ import annotations

from agentreplay.kv.manager import KVManager
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.request import Request
from agentreplay.scheduler.scheduler import Scheduler
from tests.kv.pool_harness import BIG, BS, Harness, run_turn


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
    sched = Scheduler(KVManager(sp, enable_prefix_caching=False), max_num_seqs=8, max_num_batched_tokens=BIG)
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
        sched.kv.free(r)
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
