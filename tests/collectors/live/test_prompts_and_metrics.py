"""Prompt construction (exact counts, shared prefix, append-only history), token scaling and the Prometheus
parser, without any server."""

from __future__ import annotations

import os

import pytest

from agentreplay.sim.workload import compile_trace
from collectors.live.metrics_scrape import deltas, parse_prometheus, snapshot
from collectors.live.prompts import PromptBuilder, id_range, render_text, scale_workload
from tests.factories import make_trace


def lcp(a: list[int], b: list[int]) -> int:
    return len(os.path.commonprefix([a, b]))


def test_prompts_have_exact_lengths_shared_prefix_and_reuse() -> None:
    w = compile_trace(make_trace([[(40, 5, 1.0), (60, 4, 1.0), (50, 3, None)]] * 3, shared_prefix_tokens=16))
    b = PromptBuilder(w, seed=3)
    lo, hi = id_range()
    firsts = []
    for p in range(w.n_programs):
        state, ctx = b.program(p), None
        for t in range(w.n_turns_of(p)):
            g = int(w.turn_start[p]) + t
            ids, kept = state.next_prompt(int(w.input_tokens[g]), int(w.reused_tokens[g]))
            assert len(ids) == w.input_tokens[g]
            assert all(lo <= i < hi for i in ids)
            if t == 0:
                firsts.append(ids)
                assert kept == 16
            else:
                assert kept == min(int(w.reused_tokens[g]), len(ctx))
                assert lcp(ids, ctx) == kept  # exactly the reuse: the next id differs
            out = state.placeholder_output(int(w.output_tokens[g]))
            state.add_output(ids, out)
            ctx = ids + out
    for i in range(len(firsts)):
        for j in range(i + 1, len(firsts)):
            assert lcp(firsts[i], firsts[j]) == 16
    again = PromptBuilder(w, seed=3).program(1).next_prompt(40, 0)
    assert again == PromptBuilder(w, seed=3).program(1).next_prompt(40, 0)  # deterministic


def test_prefix_is_kept_even_when_the_trace_reuses_less() -> None:
    w = compile_trace(make_trace([[(40, 5, 1.0), (60, 4, None)]], shared_prefix_tokens=16))
    state = PromptBuilder(w).program(0)
    first, _ = state.next_prompt(40, 0)
    state.add_output(first, [2000] * 5)
    second, kept = state.next_prompt(60, 4)  # compaction: trace says only 4 tokens reused
    assert kept == 16 and second[:16] == first[:16] and second[16] != first[16]


def test_scale_workload_keeps_invariants() -> None:
    w = compile_trace(make_trace([[(1000, 31, 1.0), (1500, 1, 1.0), (900, 40, None)]], shared_prefix_tokens=700))
    s = scale_workload(w, 0.1)
    assert s.input_tokens.tolist() == [100, 150, 90]
    assert s.output_tokens.tolist() == [3, 1, 4]  # 0.1 -> at least one
    assert (s.reused_tokens <= s.input_tokens).all()
    assert s.reused_tokens[1] <= s.input_tokens[0] + s.output_tokens[0]
    assert s.prefix_tokens[0] == 70
    assert scale_workload(w, 1.0) is w
    with pytest.raises(ValueError, match="> 0"):
        scale_workload(w, 0)


def test_text_rendering_is_one_word_per_id() -> None:
    assert len(render_text(list(range(1000, 1100))).split()) == 100


METRICS = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500.0
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600.0
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:cache_config_info{block_size="16",num_gpu_blocks="12345",note="a \\"quoted\\" \\\\ value"} 1.0
some_metric_without_labels 3 1700000000000
broken line here
"""


def test_prometheus_parser_and_snapshot() -> None:
    samples, bad = parse_prometheus(METRICS)
    assert bad == 1
    assert samples[-1].name == "some_metric_without_labels" and samples[-1].value == 3
    s = snapshot(METRICS, 1.0)
    assert s.counters["prefix_cache_queries_tokens"] == 1500  # summed over engines, gpu_ alias not added
    assert s.counters["prefix_cache_hits_tokens"] == 600
    assert s.counters["preemptions"] == 2
    assert s.gauges["kv_cache_usage"] == 0.5
    assert s.cache_config() == {"num_gpu_blocks": 12345, "block_size": 16}
    assert s.info["vllm:cache_config_info"]["note"] == 'a "quoted" \\ value'
    assert s.engine == "vllm"
    later = snapshot(METRICS.replace("} 600.0", "} 900.0"), 2.0)
    assert deltas(s, later)["prefix_cache_hits_tokens"] == 300
    assert deltas(s, later)["preemptions"] == 0
    assert deltas(None, later) == {}
    assert snapshot('vllm:num_requests_running{a="b"} NaN\n', 0).gauges == {}
