"""KV residency model: paged HBM block pool with vLLM v1 prefix caching, keyed by structural block identity."""

from agentreplay.kv.block_pool import BlockPool, KVBlock, OwnerId
from agentreplay.kv.free_queue import FreeBlockQueue
from agentreplay.kv.keys import BlockKey, BlockKeyer, HashIdKeyer, SegmentKeyer

__all__ = [
    "BlockKey",
    "BlockKeyer",
    "BlockPool",
    "FreeBlockQueue",
    "HashIdKeyer",
    "KVBlock",
    "OwnerId",
    "SegmentKeyer",
]
