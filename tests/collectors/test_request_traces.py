"""Request-level trace collectors (Splitwise, Azure LLM inference, Mooncake, LLMServingSim): real samples, bad input.

The Splitwise, Azure and Mooncake files are read from ../shared (skipped when absent); the LLMServingSim sample
is a 4-line fixture (tests/collectors/data/PROVENANCE.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentreplay.sim.workload import compile_trace
from agentreplay.trace.io import read_trace, validate
from collectors.base import CollectError
from collectors.mooncake import reuse_bound
from collectors.registry import collect, detect_format
from tests.conftest import shared_path

RT = ("datasets", "request-traces")
DATA = Path(__file__).parent / "data"
LSS = DATA / "llmservingsim_sharegpt_req100_rate10_llama_head4.jsonl"


def _one_request_programs(res) -> None:
    validate(res.trace)
    assert (res.trace.programs["n_turns"] == 1).all()
    assert (res.trace.turns["reused_tokens"] == 0).all()
    assert res.trace.programs["arrival_s"].min() == 0.0
    assert (res.trace.programs["arrival_s"].to_numpy() == res.trace.turns["t_request_s"].to_numpy()).all()


def test_splitwise_real_counts_and_rows(tmp_path) -> None:
    conv = shared_path(*RT, "splitwise", "splitwise_conv.csv")
    res = collect("splitwise", conv, tmp_path / "sw")
    assert (res.n_programs, res.files_read, res.skips) == (19_366, 1, [])
    _one_request_programs(res)
    t = res.trace.turns
    assert t[["input_tokens", "output_tokens"]].iloc[:2].to_numpy().tolist() == [[374, 44], [396, 109]]
    assert t["t_request_s"].iloc[1] == pytest.approx(4.314579)
    assert detect_format(conv) == "splitwise"
    both = collect("splitwise", conv.parent)
    assert both.n_programs == 19_366 + 8_819
    assert any("overlaid" in n for n in both.notes)


def test_azure_real_is_splitwise_on_one_wall_clock() -> None:
    """Vidur's Splitwise CSV is the Azure conv trace relative to its first request: an independent check of the
    7-digit timestamp parsing, and code lands 77.3 s after conv's first request on the shared clock."""
    az = collect("auto", shared_path(*RT, "azure-llm-inference-2023"))
    assert az.fmt == "azure-llm"
    assert (az.n_programs, az.files_read, az.skips) == (19_366 + 8_819, 2, [])
    _one_request_programs(az)
    t = az.trace.turns
    conv = t[t["program_id"].str.contains("_conv/")]
    code = t[t["program_id"].str.contains("_code/")]
    assert code["t_request_s"].min() == pytest.approx(77.2993700, abs=1e-6)
    sw = collect("splitwise", shared_path(*RT, "splitwise", "splitwise_conv.csv")).trace.turns
    rel = conv["t_request_s"].to_numpy() - conv["t_request_s"].iloc[0]
    assert np.abs(rel - sw["t_request_s"].to_numpy()).max() < 1e-6
    assert (conv["input_tokens"].to_numpy() == sw["input_tokens"].to_numpy()).all()
    assert (conv["output_tokens"].to_numpy() == sw["output_tokens"].to_numpy()).all()


def test_mooncake_real_keeps_hash_ids_and_their_sharing(tmp_path) -> None:
    path = shared_path(*RT, "mooncake-fast25", "conversation_trace.jsonl")
    res = collect("auto", path, tmp_path / "mc")
    assert res.fmt == "mooncake"
    assert (res.n_programs, res.skips) == (12_031, [])
    _one_request_programs(res)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    trace = read_trace(tmp_path / "mc")
    back = trace.turns
    assert [list(v) for v in back["prefix_hash_ids"].iloc[:3]] == [r["hash_ids"] for r in rows[:3]]
    assert (back["hash_block_tokens"] == 512).all()
    assert back["t_request_s"].iloc[-1] == rows[-1]["timestamp"] / 1000
    hit, total = reuse_bound([(r["hash_ids"], r["input_length"]) for r in rows])
    assert hit / total == pytest.approx(0.373, abs=5e-4)
    assert any(f"{hit / total:.3f} of prompt tokens" in n for n in res.notes)
    w = compile_trace(trace)
    assert w.chains is not None and w.seg_bounds is not None and all(c is not None for c in w.chains)


def test_llmservingsim_sample_and_token_block_ids(tmp_path) -> None:
    res = collect("auto", LSS)
    assert res.fmt == "llmservingsim"
    assert (res.n_programs, res.skips) == (4, [])
    _one_request_programs(res)
    t = res.trace.turns
    assert t["input_tokens"].tolist() == [25, 19, 91, 23]
    assert t["t_request_s"].iloc[1] == pytest.approx((347938951 - 46926808) / 1e9)
    assert [None if v is None else len(v) for v in t["prefix_hash_ids"]] == [1, 1, 5, 1]  # whole 16-token blocks
    # two prompts with the same first 40 tokens share 2 blocks, not the third
    a = list(range(40)) + [7] * 10
    b = list(range(40)) + [9] * 10
    f = tmp_path / "w.jsonl"
    f.write_text(
        "".join(
            json.dumps({"input_toks": len(x), "output_toks": 3, "arrival_time_ns": i * 10**9, "input_tok_ids": x})
            + "\n"
            for i, x in enumerate((a, b))
        )
    )
    ids = collect("llmservingsim", f).trace.turns["prefix_hash_ids"].tolist()
    assert ids[0][:2] == ids[1][:2] and ids[0][2] != ids[1][2]


@pytest.mark.parametrize(
    ("fmt", "name", "text", "reason"),
    [
        (
            "splitwise",
            "s.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n1.0,abc,3\n",
            "line 3: field 'num_prefill_tokens' = 'abc' is not an integer",
        ),
        (
            "splitwise",
            "s.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n-1.0,10,2\n",
            "line 2: field 'arrived_at' = '-1.0' is not a finite non-negative number",
        ),
        ("splitwise", "s.csv", "arrived_at,num_prefill_tokens\n0.0,10\n", "lacks column(s) ['num_decode_tokens']"),
        (
            "azure-llm",
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,2\n2023-13-16 18:15:47.0,10,2\n",
            "line 3: field 'TIMESTAMP' = '2023-13-16 18:15:47.0'",
        ),
        (
            "azure-llm",
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,\n",
            "line 2: field 'GeneratedTokens' is empty",
        ),
        (
            "mooncake",
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}\n',
            "line 1: field 'hash_ids' has 3 ids, more than the 2 blocks of 512 tokens of input_length 600",
        ),
        (
            "mooncake",
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1]}\n'
            '{"timestamp": 5, "input_length": 600, "output_length": 2}\n',
            "line 2: missing field(s) ['hash_ids']",
        ),
        (
            "mooncake",
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": -2, "hash_ids": [1]}\n',
            "line 1: field 'output_length' = -2 is below 0",
        ),
        (
            "llmservingsim",
            "l.jsonl",
            '{"input_toks": 3, "output_toks": 1, "arrival_time_ns": 0, "input_tok_ids": [1]}\n',
            "line 1: field 'input_tok_ids' = 1 ids, expected a list of input_toks = 3",
        ),
        (
            "llmservingsim",
            "l.jsonl",
            '{"input_toks": 3, "output_toks": 1, "arrival_time_ns": 0}\n{"input_toks": 3\n',
            "line 2: not valid JSON",
        ),
    ],
)
def test_bad_input_names_file_line_field_value(tmp_path, fmt, name, text, reason) -> None:
    f = tmp_path / name
    f.write_text(text)
    res = collect(fmt, f)
    assert res.n_programs == 0
    assert [s.path for s in res.skips] == [str(f)]
    assert reason in res.skips[0].reason
    with pytest.raises(CollectError, match="--strict"):
        collect(fmt, f, strict=True)
