"""Block-hash prefixes (Mooncake ``hash_ids``) as chains of prefix segments (DESIGN §3 "Prefix identity").

A trace that names each prompt's ``B``-token blocks by chained ids says exactly which prompts share which
prefix: two prompts whose id lists start with the same ``k`` ids share their first ``k * B`` tokens. The sharing
forms a trie (a conversation's later turn extends an earlier one; many requests share a system prompt and then
diverge). The simulator's pool names cached KV by *segments* (a stretch of blocks with one identity, cached as
a contiguous run from its start, :mod:`agentreplay.kv.segment_pool`), so the trie is cut into segments:

- a node (a prefix of ``d`` ids) ends a segment when it branches (two or more different next ids) or when some
  prompt's id list ends there;
- a segment is identified by the node that ends it, and covers tokens ``[start * B, end * B)`` where ``start``
  is the previous cut on the path (0 at the root);
- a prompt's chain is the list of segments on its path. Two prompts share a segment exactly when they share the
  whole path up to its end, so a segment's identity implies everything before it, as vLLM's chained block hashes
  do (``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py), and a hit walks the chain from the first segment
  and stops at the first miss (:func:`agentreplay.scheduler.scheduler.chain_hit`).

Only whole ``B``-token blocks are named: a prompt's last, partial block (its id is never reused as a full block
in the Mooncake traces) and everything after it are the request's own. The cut at every prompt end means no
prompt stops inside a segment, so a request never marks the cached tail of a longer shared segment as stale.

Approximations, as for the single shared prefix (:mod:`agentreplay.kv.segment_pool`): a request's chain
segments count as cached from its admission (a second request admitted in the same scheduler step hits them;
vLLM registers them when the step's blocks are full); a prompt that is a whole number of named blocks has its
last 16-token block recomputed (vLLM's ``prompt - 1`` cap) and that cached block becomes anonymous instead of
staying as a duplicate. One request at a time, the hits equal vLLM's block-by-block pool
(tests/sim/test_prefix_chain.py). A turn with a chain keeps its own tokens (the partial last block and the output)
in a segment of its own: in a block-hash trace a later call's reuse is named by its own ids, so pins and host-tier
offload see the chain only through the segments the call held.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def build_chains(
    hash_ids: Sequence[Sequence[int] | None], input_tokens: Sequence[int], block_tokens: Sequence[int | None]
) -> tuple[list[tuple[int, ...] | None], np.ndarray]:
    """Chains of segment ids per turn and the ``(start, end)`` token bounds of each segment ([n, 2] int64).

    ``hash_ids[t]`` None (or a turn with no whole block) gives chain None. Ids are matched as full paths, and
    the block size is part of the path, so two traces with different ``B`` never share a segment."""
    children: dict[int, set[int]] = {}  # node -> distinct next ids
    node_of: dict[tuple[int, int, int], int] = {}  # (parent node, block_tokens, id) -> node
    depth: list[int] = [0]  # tokens at the end of each node; node 0 is the root
    paths: list[list[int] | None] = []
    ends: set[int] = set()
    for ids, n_in, b in zip(hash_ids, input_tokens, block_tokens, strict=True):
        if ids is None or b is None or int(b) < 1:
            paths.append(None)
            continue
        b = int(b)
        full = min(len(ids), int(n_in) // b)
        if full == 0:
            paths.append(None)
            continue
        node, walk = 0, []
        for h in list(ids)[:full]:
            key = (node, b, int(h))
            nxt = node_of.get(key)
            if nxt is None:
                nxt = node_of[key] = len(depth)
                depth.append(depth[node] + b)
                children.setdefault(node, set()).add(int(h))
            node = nxt
            walk.append(node)
        ends.add(node)
        paths.append(walk)
    seg_of: dict[int, int] = {}
    bounds: list[tuple[int, int]] = []
    chains: list[tuple[int, ...] | None] = []
    for path in paths:
        if path is None:
            chains.append(None)
            continue
        chain: list[int] = []
        start = 0
        for node in path:
            if node in ends or len(children.get(node, ())) > 1:
                s = seg_of.get(node)
                if s is None:
                    s = seg_of[node] = len(bounds)
                    bounds.append((start, depth[node]))
                chain.append(s)
                start = depth[node]
        chains.append(tuple(chain))
    return chains, np.array(bounds, dtype=np.int64).reshape(-1, 2)
