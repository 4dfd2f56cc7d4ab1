"""Block-hash prefixes (Mooncake ``hash_ids``) as chains of shared prefix segments: trie cuts, exact hits, routing,
and the schema-1 read path."""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.kv import BlockPool
from agentreplay.sim import simulate
from agentreplay.sim.config import SimConfig
from agentreplay.sim.prefix_chain import build_chains
from agentreplay.trace.io import read_trace, write_trace
from agentreplay.trace.schema import SCHEMA_VERSION_KEY
from collectors.base import frames
from collectors.mooncake import reuse_bound
from collectors.registry import collect
from tests.conftest import shared_path
from tests.factories import make_trace

B = 512
#: A, then B sharing A's first 2 blocks, then C extending A by 2 blocks (a conversation's next turn)
REQS = [([1, 2, 3, 4, 90], 4 * B + 10), ([1, 2, 5, 91], 3 * B + 1), ([1, 2, 3, 4, 6, 7, 92], 6 * B + 5)]


def _mooncake(tmp_path, reqs=REQS, gap_ms: int = 60_000):
    f = tmp_path / "mc.jsonl"
    f.write_text(
        "".join(
            json.dumps({"timestamp": i * gap_ms, "input_length": n, "output_length": 4, "hash_ids": ids}) + "\n"
            for i, (ids, n) in enumerate(reqs)
        )
    )
    return collect("mooncake", f).trace


def test_trie_is_cut_at_branches_and_prompt_ends() -> None:
    chains, bounds = build_chains([ids for ids, _ in REQS], [n for _, n in REQS], [B] * 3)
    spans = [[tuple(bounds[s]) for s in c] for c in chains]
    assert spans == [
        [(0, 2 * B), (2 * B, 4 * B)],  # cut after block 2 (B branches off) and at A's end
        [(0, 2 * B), (2 * B, 3 * B)],
        [(0, 2 * B), (2 * B, 4 * B), (4 * B, 6 * B)],
    ]
    assert chains[0][:2] == chains[2][:2] and chains[0][0] == chains[1][0] and chains[1][1] != chains[0][1]
    # only whole blocks are named; no ids or no whole block: no chain
    short, _ = build_chains([[1, 2], [3], None], [B + 5, B - 1, 100], [B, B, None])
    assert short == [(0,), None, None]


def test_hits_follow_the_shared_ids_exactly(tmp_path) -> None:
    cfg = SimConfig().replace(workload={"arrival": "trace"})
    res = simulate(_mooncake(tmp_path), cfg)
    assert res.turns["cached_tokens"].tolist() == [0, 2 * B, 4 * B]
    assert res.turns["cached_prefix_tokens"].tolist() == [0, 2 * B, 4 * B]
    assert res.summary["unit"] == "request" and res.summary["requests"] == 3
    assert res.summary["e2e_s"] == res.summary["jct_s"]
    off = simulate(_mooncake(tmp_path), cfg.replace(cache={"enable_prefix_caching": False}))
    assert off.turns["cached_tokens"].tolist() == [0, 0, 0]


def test_a_chain_hit_stops_where_lru_eviction_cut_the_chain(tmp_path) -> None:
    """200 blocks: A (129 blocks) is released, X (161 blocks) then evicts LRU-first: A's own blocks, all of A's
    second segment (vLLM frees a request's blocks tail first, so later blocks are evicted first) and the top
    25 of the first, so C hits the first segment's 39 surviving blocks and nothing after them."""
    reqs = [REQS[0], ([50, 51, 52, 53, 54, 55], 5 * B + 7), REQS[2]]
    cfg = SimConfig().replace(workload={"arrival": "trace"}, cache={"num_gpu_blocks": 200})
    res = simulate(_mooncake(tmp_path, reqs), cfg)
    assert res.turns["cached_tokens"].tolist() == [0, 0, 39 * 16]
    big = simulate(_mooncake(tmp_path, reqs), cfg.replace(cache={"num_gpu_blocks": 100_000}))
    assert big.turns["cached_tokens"].tolist() == [0, 0, 4 * B]


def test_cache_aware_router_sends_a_shared_chain_home(tmp_path) -> None:
    cfg = SimConfig().replace(
        workload={"arrival": "trace"}, hardware={"instances": 2}, router={"policy": "cache-aware"}
    )
    res = simulate(_mooncake(tmp_path), cfg)
    inst = res.turns["instance"].tolist()
    assert inst[2] == inst[0]  # C extends A: 4 of its 6 blocks are on A's instance
    assert res.turns["cached_tokens"].tolist()[2] == 4 * B


def test_unbounded_cache_hits_what_the_ids_share_on_the_real_trace(tmp_path) -> None:
    """One request at a time and a cache that never evicts: the simulated hits are the ids' sharing, less one
    16-token block per request whose whole prompt is shared whole blocks (vLLM recomputes the last token)."""
    path = shared_path("datasets", "request-traces", "mooncake-fast25", "conversation_trace.jsonl")
    lines = path.read_text().splitlines()[:400]
    f = tmp_path / "head.jsonl"
    f.write_text("\n".join(lines) + "\n")
    rows = [json.loads(x) for x in lines]
    hit, _ = reuse_bound([(r["hash_ids"], r["input_length"]) for r in rows])
    cfg = SimConfig().replace(workload={"arrival": "closed", "concurrency": 1}, cache={"num_gpu_blocks": 2_000_000})
    res = simulate(collect("mooncake", f).trace, cfg)
    cached = int(res.turns["cached_tokens"].sum())
    aligned = sum(r["input_length"] % B == 0 for r in rows)
    assert hit - 16 * aligned <= cached <= hit
    assert cached > 0.1 * res.summary["input_tokens"]


def test_schema_1_traces_still_read(tmp_path) -> None:
    write_trace(tmp_path / "t", make_trace([[(100, 5, 1.0), (120, 5, None)]]))
    p = tmp_path / "t" / "turns.parquet"
    table = pq.read_table(p).drop_columns(["prefix_hash_ids", "hash_block_tokens"])
    meta = dict(table.schema.metadata)
    meta[SCHEMA_VERSION_KEY] = b"1"
    pq.write_table(table.replace_schema_metadata(meta), p)
    back = read_trace(tmp_path / "t")
    assert back.turns["prefix_hash_ids"].isna().all() and back.turns["hash_block_tokens"].isna().all()
    assert simulate(back).summary["turns"] == 2
    meta[SCHEMA_VERSION_KEY] = b"0"
    pq.write_table(table.replace_schema_metadata(meta), p)
    with pytest.raises(ValueError, match="schema version '0'"):
        read_trace(tmp_path / "t")


# ------------------------------------------------------------------ differential: the simulator vs BlockPool
HBT = 64  #: hash block tokens in the generated traces (4 simulator blocks of 16)


@dataclass(frozen=True, slots=True)
class PathKeyer:
    """vLLM-style chained key of 16-token block ``i`` of a prompt named by hash ids: the id path up to the hash
    block containing it (plus ``i``); blocks past the whole named hash blocks are the request's own."""

    ids: tuple[int, ...]
    full: int
    owner: int

    def key(self, block_idx: int) -> Hashable:
        j = block_idx * 16 // HBT
        return (self.ids[: j + 1], block_idx) if j < self.full else ("own", self.owner, block_idx)


@st.composite
def hash_traces(draw):
    """Requests that extend a random earlier request's named prefix (or start afresh) by new hash blocks; the
    prompt ends inside a partial hash block, so no hit is capped by vLLM's ``prompt - 1`` rule."""
    n = draw(st.integers(2, 10))
    fresh = iter(range(10_000))
    reqs: list[tuple[list[int], int, int]] = []
    for _ in range(n):
        path: list[int] = []
        if reqs and draw(st.booleans()):
            parent = reqs[draw(st.integers(0, len(reqs) - 1))][0]
            full_parent = len(parent) - 1
            path = parent[: draw(st.integers(0, full_parent))]
        path = path + [next(fresh) for _ in range(draw(st.integers(0 if path else 1, 3)))]
        inp = len(path) * HBT + draw(st.integers(1, HBT - 1))
        reqs.append(([*path, next(fresh)], inp, draw(st.integers(1, 40))))
    return reqs


@settings(max_examples=60, deadline=None)
@given(reqs=hash_traces(), spare=st.integers(0, 40))
def test_sequential_hits_and_evictions_match_a_block_level_pool(reqs, spare) -> None:
    """One request at a time through ``simulate`` (chains, LRU eviction by segment runs) against vLLM's
    block-by-block pool with chained keys: the same prefix hit for every request."""
    need = max(-(-(inp + out) // 16) for _, inp, out in reqs)
    blocks = need + spare
    rows = [
        {
            "program_id": f"r{i}",
            "source": "t",
            "task_id": str(i),
            "agent": "none",
            "model": "t",
            "n_turns": 1,
            "resolved": None,
            "arrival_s": None,
            "shared_prefix_id": None,
            "shared_prefix_tokens": 0,
        }
        for i in range(len(reqs))
    ]
    turns = [
        {
            "program_id": f"r{i}",
            "turn_idx": 0,
            "input_tokens": inp,
            "output_tokens": out,
            "reused_tokens": 0,
            "provider_cached_tokens": None,
            "reasoning_tokens": None,
            "tokens_kind": "exact",
            "tool_class": "other",
            "tool_name": None,
            "tool_duration_s": None,
            "tool_duration_kind": None,
            "llm_latency_s": None,
            "t_request_s": None,
            "t_response_s": None,
            "prefix_hash_ids": ids,
            "hash_block_tokens": HBT,
        }
        for i, (ids, inp, out) in enumerate(reqs)
    ]
    cfg = SimConfig().replace(workload={"arrival": "closed", "concurrency": 1}, cache={"num_gpu_blocks": blocks})
    sim = simulate(frames(rows, turns), cfg).turns.sort_values("program_id", key=lambda s: s.str[1:].astype(int))
    bp = BlockPool(blocks, 16)
    expected = []
    for i, (ids, inp, out) in enumerate(reqs):
        keyer = PathKeyer(tuple(ids), min(len(ids), inp // HBT), i)
        expected.append(bp.match_prefix(keyer, inp) * 16)
        assert bp.allocate(i, keyer, inp)
        assert bp.append_tokens(i, out - 1)
        bp.free(i)
    assert sim["cached_tokens"].tolist() == expected
