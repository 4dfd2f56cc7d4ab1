"""vLLM's priority mode preempts the worst running request even when it was already scheduled in the step.

``Scheduler.schedule`` (``--scheduling-policy priority``) picks ``max(self.running, key=lambda r: (r.priority,
r.arrival_time))`` over the whole running list when a request cannot get its blocks, and takes a victim scheduled
earlier in the same step back out of it: its tokens return to the budget, its blocks (this step's included) are
freed. Found turn by turn against vLLM's own scheduler (tests/integration/test_vllm_lockstep.py): the simulator
used to pick only among the requests not yet scheduled.

Blocks of 16 tokens, 5 in all. A (batch, rank 2) has a 20-token prompt (2 blocks) and is admitted first; B
(interactive, rank 0) has a 48-token prompt (3 blocks) and is admitted in the next step. In the third step A
decodes (no new block: its 21st token) and then B needs a fourth block for its 49th token, with none free."""

from __future__ import annotations

from agentreplay.kv.manager import KVManager
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.request import ProgramInfo, Request
from agentreplay.scheduler.queue import PriorityOrder
from agentreplay.scheduler.scheduler import Scheduler
from agentreplay.scheduler.victim import LowestPriority
from tests.factories import make_request

BS = 16


def _two_running() -> tuple[Scheduler, SegmentPool, Request, Request]:
    pool = SegmentPool(5, BS)
    sched = Scheduler(KVManager(pool), 8, 4096, order=PriorityOrder(), victim=LowestPriority(), reserve_full_isl=True)
    a = make_request(0, 20, target_out=10, info=ProgramInfo(0.0, priority=2))
    b = make_request(1, 48, target_out=10, release_s=1.0, info=ProgramInfo(1.0, priority=0))
    sched.waiting.append(a)
    sched.update_from_output(sched.schedule(0.0), 0.5)
    sched.waiting.append(b)
    sched.update_from_output(sched.schedule(1.0), 1.5)
    assert [r.program for r in sched.running] == [0, 1] and pool.free_blocks == 0
    return sched, pool, a, b


def test_a_victim_already_scheduled_in_the_step_is_taken_back_out() -> None:
    sched, pool, a, b = _two_running()
    plan = sched.schedule(2.0)
    assert plan.preempted == [a] and plan.decode == [b] and not plan.prefill
    assert sched.running == [b] and sched.waiting == [a] and a.preemptions == 1 and a.computed == 0
    # A's two blocks (its 21 tokens, the one this step would have computed included) are free; B took one
    assert pool.free_blocks == 1
    sched.update_from_output(plan, 2.5)
    assert (b.computed, b.generated) == (49, 2)


def test_the_worst_of_the_whole_running_list_is_the_victim_even_when_it_is_the_first() -> None:
    """The victim is picked by (rank, arrival) over every running request, not among those after the one that
    needs the blocks: with the priorities swapped, B (now the worst) preempts itself and A decodes."""
    sched, _, a, b = _two_running()
    a.info.priority, b.info.priority = 0, 2
    plan = sched.schedule(2.0)
    assert plan.preempted == [b] and plan.decode == [a]
    assert sched.running == [a] and b.preemptions == 1
