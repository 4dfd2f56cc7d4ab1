"""Collector for Mooncake request traces (kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl``).

Native format (the release's README): one JSON object per line, ``{"timestamp": <ms, relative arrival>,
"input_length": <tokens>, "output_length": <tokens>, "hash_ids": [<int>, ...]}``. ``hash_ids`` are remapped
prefix block hashes of the prompt's 512-token blocks (``ceil(input_length / 512)`` of them, the last one
partial unless the prompt is a multiple of 512): two requests whose lists start with the same ``k`` ids share
their first ``k * 512`` tokens, real cross-request prefix reuse.

Each line becomes a one-turn program (:mod:`collectors.requests`), arrival = ``timestamp / 1000`` s. The ids go
to the trace as they are (``turns.prefix_hash_ids``, ``hash_block_tokens = 512``); the simulator turns them into
chains of shared prefix segments (:mod:`agentreplay.sim.prefix_chain`). A note reports the sharing the ids
describe: the share of prompt tokens in whole blocks that an earlier request of the trace already named (the hit
rate of an unbounded prefix cache), an upper bound for what a simulated cache can hit.

Bad input: a line that is not a JSON object, misses a field, has a non-integer or negative number, a
``hash_ids`` that is not a list of non-negative integers, or more ids than the prompt has 512-token blocks,
makes the file skip with the line, field and value.
"""

from __future__ import annotations

from pathlib import Path

from collectors.base import BadInput, CollectResult
from collectors.requests import (
    Req,
    as_int,
    collect_requests,
    detects,
    jsonl_objects,
    recogniser,
    require,
)

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
BLOCK_TOKENS = 512  #: the release's README: "The block size is 512 tokens"


def parse_file(path: Path) -> list[Req]:
    out = []
    for line, obj in jsonl_objects(path):
        require(obj, FIELDS, line)
        inp = as_int(obj["input_length"], line, "input_length", minimum=1)
        ids = obj["hash_ids"]
        if not isinstance(ids, list):
            raise BadInput(f"line {line}: field 'hash_ids' = {ids!r} is not a list")
        hashes = [as_int(h, line, "hash_ids") for h in ids]
        if len(hashes) > -(-inp // BLOCK_TOKENS):
            raise BadInput(
                f"line {line}: field 'hash_ids' has {len(hashes)} ids, more than the "
                f"{-(-inp // BLOCK_TOKENS)} blocks of {BLOCK_TOKENS} tokens of input_length {inp}"
            )
        out.append(
            Req(
                line,
                as_int(obj["timestamp"], line, "timestamp") / 1000.0,
                inp,
                as_int(obj["output_length"], line, "output_length"),
                hashes,
                BLOCK_TOKENS,
            )
        )
    return out


_recognise = recogniser(".jsonl", FIELDS)


def reuse_bound(reqs: list[tuple[list[int], int]]) -> tuple[int, int]:
    """``(tokens in whole blocks already named by an earlier request, prompt tokens)`` over ``(ids, input)``
    in arrival order: an unbounded prefix cache's hits (prefixes only: a block counts when its whole id path
    was seen before)."""
    nodes: dict[tuple[int, int], int] = {}  # (parent node, id) -> node: the id paths seen so far
    hit = total = 0
    for ids, inp in reqs:
        total += inp
        node, matched, k = 0, True, 0
        for h in ids[: min(len(ids), inp // BLOCK_TOKENS)]:
            nxt = nodes.get((node, h))
            if nxt is None:
                matched = False
                nxt = nodes[(node, h)] = len(nodes) + 1
            elif matched:
                k += 1
            node = nxt
        hit += k * BLOCK_TOKENS
    return hit, total


class MooncakeCollector:
    name = "mooncake"
    description = "Mooncake request traces (JSONL: timestamp ms, input_length, output_length, hash_ids)"

    def detect(self, path: Path) -> bool:
        return detects(path, ".jsonl", _recognise)

    def collect(self, path: Path) -> CollectResult:
        result = collect_requests(
            self.name,
            path,
            ".jsonl",
            _recognise,
            parse_file,
            shared_clock=False,
            clock_note="each file's timestamps start at its own first request; the files are "
            "overlaid from t = 0 (their hash ids are kept apart by file)",
        )
        turns = result.trace.turns
        if len(turns):
            # ids are remapped per file: keep files apart so equal ids of two files never look shared
            if result.files_read > 1:
                stems = turns["program_id"].str.split("/").str[1]
                offset = {s: i << 40 for i, s in enumerate(sorted(set(stems)))}
                turns["prefix_hash_ids"] = [
                    [h + offset[s] for h in ids] for ids, s in zip(turns["prefix_hash_ids"], stems, strict=True)
                ]
            order = turns.assign(_t=turns["t_request_s"]).sort_values("_t", kind="stable")
            hit, total = reuse_bound(list(zip(order["prefix_hash_ids"], order["input_tokens"], strict=True)))
            result.notes.append(
                f"hash_ids: {hit / total:.3f} of prompt tokens lie in whole {BLOCK_TOKENS}-token "
                f"blocks an earlier request already named (unbounded prefix cache hit rate)"
            )
        return result
