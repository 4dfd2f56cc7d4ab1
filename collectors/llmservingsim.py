"""Collector for LLMServingSim / vLLM-benchmark request workloads (casys-kaist/LLMServingSim ``dataset/*.jsonl``).

Native format: one JSON object per line, ``{"input_toks": <tokens>, "output_toks": <tokens>,
"arrival_time_ns": <ns>, "input_tok_ids": [...], "output_tok_ids": [...]}`` (the token id lists are optional),
the request list LLMServingSim replays, sampled from ShareGPT with the token counts of the serving model's
tokenizer and arrivals of a benchmark client (e.g. ``sharegpt_req100_rate10_llama.jsonl``: 100 requests, Poisson
at 10 requests/s). Each line becomes a one-turn program (:mod:`collectors.requests`), arrival =
``arrival_time_ns / 1e9`` s.

Prefix identity from the tokens: when ``input_tok_ids`` is present (and has ``input_toks`` ids) the prompt's
16-token blocks are named by chained ids (equal ids = equal tokens up to and including that block, as vLLM's
``hash_block_tokens`` chains them), so prompts that really share leading tokens share cached KV in the
simulator. Without the ids nothing is assumed shared.
"""

from __future__ import annotations

from pathlib import Path

from collectors.base import BadInput, CollectResult
from collectors.requests import (
    Req,
    as_int,
    as_time,
    collect_requests,
    detects,
    jsonl_objects,
    recogniser,
    require,
)

FIELDS = ("input_toks", "output_toks", "arrival_time_ns")
BLOCK_TOKENS = 16  #: vLLM's default block size: the granularity its prefix cache can share at


def block_ids(tokens: list[int], table: dict[tuple[int, tuple[int, ...]], int]) -> list[int]:
    """Chained ids of the full ``BLOCK_TOKENS``-token blocks of ``tokens``; ``table`` maps (previous id, block
    tokens) to an id and is shared by all prompts of a collect."""
    out: list[int] = []
    prev = -1
    for i in range(len(tokens) // BLOCK_TOKENS):
        key = (prev, tuple(tokens[i * BLOCK_TOKENS : (i + 1) * BLOCK_TOKENS]))
        prev = table.setdefault(key, len(table))
        out.append(prev)
    return out


def parse_file(path: Path, table: dict[tuple[int, tuple[int, ...]], int] | None = None) -> list[Req]:
    table = {} if table is None else table
    out = []
    for line, obj in jsonl_objects(path):
        require(obj, FIELDS, line)
        inp = as_int(obj["input_toks"], line, "input_toks", minimum=1)
        ids = None
        toks = obj.get("input_tok_ids")
        if toks is not None:
            if not isinstance(toks, list) or len(toks) != inp:
                got = f"{len(toks)} ids" if isinstance(toks, list) else repr(toks)
                raise BadInput(f"line {line}: field 'input_tok_ids' = {got}, expected a list of input_toks = {inp}")
            ids = block_ids([as_int(t, line, "input_tok_ids") for t in toks], table) or None
        out.append(
            Req(
                line,
                as_time(obj["arrival_time_ns"], line, "arrival_time_ns") / 1e9,
                inp,
                as_int(obj["output_toks"], line, "output_toks"),
                ids,
                BLOCK_TOKENS if ids is not None else None,
            )
        )
    return out


_recognise = recogniser(".jsonl", FIELDS)


class LLMServingSimCollector:
    name = "llmservingsim"
    description = "LLMServingSim / vLLM benchmark workloads (JSONL: input_toks, output_toks, arrival_time_ns)"

    def detect(self, path: Path) -> bool:
        return detects(path, ".jsonl", _recognise)

    def collect(self, path: Path) -> CollectResult:
        table: dict[tuple[int, tuple[int, ...]], int] = {}
        return collect_requests(
            self.name,
            path,
            ".jsonl",
            _recognise,
            lambda p: parse_file(p, table),
            shared_clock=False,
            clock_note="each file's arrival_time_ns starts at its own first request; the files are overlaid from t = 0",
        )
