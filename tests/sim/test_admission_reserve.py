"""Admission with vLLM 0.32's full-sequence gate next to async KV loads (``vllm/v1/core/sched/scheduler.py``:
``allocate_slots(full_sequence_must_fit=scheduler_reserve_full_isl, reserved_blocks=...)``, where
``reserved_blocks`` is the in-flight prefills' remaining blocks only when the admission starts an async load).

Blocks of 16 tokens, 20 free; program 0 has 4 blocks (64 tokens) in a host tier, nobody has anything in HBM."""

from __future__ import annotations

from agentreplay.engine import Engine
from agentreplay.kv.manager import KVManager
from agentreplay.kv.residency import Residency
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.kv.tiers import HostTier, Link
from agentreplay.request import Request
from agentreplay.scheduler.scheduler import Scheduler
from tests.factories import make_request

BS = 16


def scheduler(host_blocks: dict[int, int]) -> Scheduler:
    """20 free HBM blocks; ``host_blocks[program]`` leading history blocks of a program in host DRAM."""
    engine = Engine()
    pool = SegmentPool(20, BS)
    tier = HostTier("dram0", 1000, Link("dram0", engine, gbps=1.0, latency_s=0.0))
    for program, blocks in host_blocks.items():
        tier.put(program, blocks)
    residency = Residency(engine, pool, block_bytes=1 << 16, tiers=[tier])
    return Scheduler(
        KVManager(pool, residency=residency), max_num_seqs=8, max_num_batched_tokens=4096, reserve_full_isl=True
    )


def request(program: int, prompt: int, reuse: int) -> Request:
    return make_request(program, prompt, target_out=4, reuse=reuse)


def test_a_plain_admission_checks_its_whole_prompt_alone() -> None:
    # program 0 starts loading 4 of its 10 blocks (6 still to come); program 1's whole prompt (12 blocks) fits the
    # 16 free blocks: vLLM admits it without keeping program 0's 6 blocks free.
    sched = scheduler({0: 4})
    sched.waiting.extend([request(0, 160, 160), request(1, 192, 0)])
    plan = sched.schedule()
    assert [r.program for r in plan.loading] == [0] and [r.program for r in plan.admitted] == [1]
    assert sched.pool.free_blocks == 20 - 4 - 12


def test_an_async_load_keeps_the_in_flight_prefills_blocks_free() -> None:
    # program 0 loads 4 blocks and still needs 6 more; program 2 (12 blocks) would load 11: its prompt fits the 16 free
    # blocks, but its load does not fit beside program 0's 6 kept free, so vLLM does not start it.
    sched = scheduler({0: 4, 2: 11})
    a, b = request(0, 160, 160), request(2, 192, 192)
    sched.waiting.extend([a, b])
    plan = sched.schedule()
    assert [r.program for r in plan.loading] == [0]
    assert not b.loading and sched.pool.free_blocks == 16
    # with 5 blocks instead of 11 it fits beside the reservation and starts loading too
    sched = scheduler({0: 4, 2: 5})
    sched.waiting.extend([request(0, 160, 160), request(2, 192, 192)])
    assert [r.program for r in sched.schedule().loading] == [0, 2]
