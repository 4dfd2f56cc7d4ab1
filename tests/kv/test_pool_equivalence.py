"""Differential test, stateful: random agent traffic drives SegmentPool (through the real Scheduler) and BlockPool
(vLLM v1, block by block) side by side, and after every operation they must agree (what is compared and what is
excluded by construction: :mod:`tests.kv.pool_harness`)."""

from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.kv.pool_harness import BS, Harness


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
            budget = max(budget, prog.prefix_tokens)  # the first chunk covers the shared prefix (pool_harness doc)
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
