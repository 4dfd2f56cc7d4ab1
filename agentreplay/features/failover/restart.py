"""What a failure leaves behind (:mod:`agentreplay.features.failover.failover`): the failed instance's fresh
scheduler over an empty KV stack, and the client's retry of a call the failure aborted."""

from __future__ import annotations

from agentreplay.engine import Engine
from agentreplay.kv.manager import KVManager
from agentreplay.kv.residency import Residency
from agentreplay.kv.segment_pool import Segment, SegmentPool
from agentreplay.kv.tiers import HostTier
from agentreplay.request import Request
from agentreplay.scheduler.scheduler import Scheduler


def fresh_scheduler(old: Scheduler, engine: Engine) -> Scheduler:
    """A scheduler like ``old`` over an empty KV stack: a new HBM pool of the same size, empty host tiers on the
    same links, no pins (the retention policy, queue order and victim policy objects are shared)."""
    kv = old.kv
    pool = SegmentPool(kv.pool.num_blocks, kv.bs)
    res = kv.residency
    residency = None
    if res is not None:
        tiers = [HostTier(t.name, t.capacity_blocks, t.link) for t in res.tiers]
        residency = Residency(engine, pool, res.block_bytes, tiers, res.remote, res.unpin_on_pressure)
        residency.log = res.log
        residency.pinned_block_s = res.pinned_block_s
        residency.unpins_on_pressure = res.unpins_on_pressure
    new_kv = KVManager(pool, kv.prefix_caching, residency, kv.retention)
    return Scheduler(
        new_kv,
        old.max_num_seqs,
        old.max_num_batched_tokens,
        order=old.order,
        victim=old.victim,
        reserve_full_isl=old.reserve_full_isl,
        lazy_decode=old.lazy_decode,
        decode_tokens=old.decode_tokens,
        index=old.index,
        log=old.log,
    )


def retry(r: Request, unrouted: Segment) -> Request:
    """The client's retry of an aborted call: the same call, released at the same time, nothing computed."""
    c = Request(
        turn=r.turn,
        program=r.program,
        turn_idx=r.turn_idx,
        prompt=r.prompt,
        target_out=r.target_out,
        reuse=r.reuse,
        pfx=None,
        prog=unrouted,
        base=0,
        release_s=r.release_s,
        info=r.info,
        tool_class=r.tool_class,
        last=r.last,
    )
    c.next_gap_s = r.next_gap_s
    c.chain_ids = r.chain_ids
    c.chain_ends = r.chain_ends
    return c
