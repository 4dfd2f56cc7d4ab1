"""Hypothesis state machine over one instance: turns are released at arbitrary moments, the engine advances in
arbitrary steps; every released turn finishes exactly once, a program's turns finish in order, and the block
pool's invariants hold throughout."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentreplay.engine import Engine
from agentreplay.kv.manager import KVManager
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.request import ProgramInfo, Request
from agentreplay.scheduler.scheduler import Scheduler
from agentreplay.sim.instance import Instance
from tests.sim.fakes import LinearPerf

BS = 4
PREFIX = 6  # tokens of the shared prefix (1 full block)


class InstanceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine = Engine()
        self.pool = SegmentPool(48, BS)
        self.sched = Scheduler(KVManager(self.pool), max_num_seqs=3, max_num_batched_tokens=24)
        self.inst = Instance(0, self.engine, LinearPerf(), self.sched, self.finished)
        self.ctx: dict[int, int] = {}  # program -> tokens of its context after its last finished turn
        self.busy: set[int] = set()
        self.done: list[tuple[int, int]] = []
        self.released: list[tuple[int, int]] = []
        self.turns: dict[int, int] = {}
        self.turn_id = 0

    def finished(self, r: Request) -> None:
        assert (r.program, r.turn_idx) not in self.done, "a turn finished twice"
        self.done.append((r.program, r.turn_idx))
        self.busy.discard(r.program)
        self.ctx[r.program] = r.prompt + r.target_out

    @rule(program=st.integers(0, 3), new=st.integers(1, 30), out=st.integers(1, 12))
    def release(self, program: int, new: int, out: int) -> None:
        if program in self.busy:
            return
        ctx = self.ctx.get(program, PREFIX)
        prompt = min(ctx + new, 150)
        reuse = min(ctx, prompt) if program in self.ctx else 0
        base = PREFIX // BS
        pfx = self.pool.segment(("prefix", "sys", base), 0)
        prog = self.pool.segment(("prog", program), base)
        idx = self.turns.get(program, 0)
        self.turns[program] = idx + 1
        self.turn_id += 1
        r = Request(
            turn=self.turn_id,
            program=program,
            turn_idx=idx,
            prompt=prompt,
            target_out=out,
            reuse=reuse,
            pfx=pfx,
            prog=prog,
            base=base,
            release_s=self.engine.now,
            info=ProgramInfo(0.0),
        )
        self.busy.add(program)
        self.released.append((program, idx))
        self.inst.submit(r)

    @precondition(lambda self: self.engine.peek_time() is not None)
    @rule(dt=st.sampled_from([0.0, 0.005, 0.02, 0.1]))
    def advance(self, dt: float) -> None:
        t = self.engine.peek_time()
        assert t is not None
        self.engine.run(until_s=t + dt)

    @invariant()
    def pool_is_consistent(self) -> None:
        self.pool.check()
        assert self.pool.used_blocks <= self.pool.num_blocks

    @invariant()
    def turns_finish_once_and_in_order(self) -> None:
        assert len(set(self.done)) == len(self.done)
        last: dict[int, int] = {}
        for program, idx in self.done:
            assert idx == last.get(program, -1) + 1, "turns of a program finished out of order"
            last[program] = idx

    def teardown(self) -> None:
        self.engine.run()
        assert sorted(self.done) == sorted(self.released), "a released turn never finished"
        assert self.pool.used_blocks == 0


TestInstanceMachine = InstanceMachine.TestCase
TestInstanceMachine.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
