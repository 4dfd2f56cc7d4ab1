"""Requests finishing in one step are freed in the running list's order, as vLLM frees them.

vLLM's ``Scheduler.update_from_output`` walks the step's ``num_scheduled_tokens`` (running requests, then the step's
admissions) and frees each finished request's blocks to the tail of the LRU free queue as it goes, so the earlier
admitted request's blocks are evicted first. A request whose prompt completes in a step (one output token) can
have been admitted after a request that decodes its last token in the same step; freeing the prompt first made the
simulator evict the wrong program's history under KV pressure (found turn by turn against vLLM's own scheduler:
tests/integration/test_vllm_lockstep.py)."""

from __future__ import annotations

from agentreplay.kv.manager import KVManager
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.scheduler.scheduler import Scheduler
from tests.factories import make_request

BS = 16


def test_a_decoder_admitted_first_is_freed_before_a_prompt_finishing_beside_it() -> None:
    pool = SegmentPool(20, BS)
    sched = Scheduler(KVManager(pool), max_num_seqs=8, max_num_batched_tokens=4096)
    older = make_request(0, 48, target_out=2)  # prefills in step 1, decodes its last token in step 2
    newer = make_request(1, 48, target_out=1)  # admitted in step 2, done when its prompt is
    sched.waiting.append(older)
    sched.update_from_output(sched.schedule(1.0), 1.0)
    sched.waiting.append(newer)
    plan = sched.schedule(2.0)
    assert [r.program for r, _, _ in plan.prefill] == [1] and plan.cohort + len(plan.decode) == 1
    finished = sched.update_from_output(plan, 2.0)
    assert [r.program for r in finished] == [0, 1]
    # the older request's history sits nearer the queue head: the next allocations evict it first
    assert [run.seg.key for run in pool.queue.runs() if run.seg is not None] == [("prog", 0), ("prog", 1)]
    pool.allocate(pool.free_blocks - 3)
    assert (older.prog.present, newer.prog.present) == (0, 3)
