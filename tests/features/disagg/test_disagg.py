"""Disaggregated prefill / decode (agentreplay.features.disagg), replayed by hand with a linear performance model.

Shared figures: ``LinearPerf(a=0.01, b=0.001)``: an iteration of ``n`` prefill tokens + ``d`` decodes costs
``0.01 + 0.001 (n + d)`` s; one decoding request alone costs 0.011 s a step. The default model (Llama-3.1-8B, bf16
KV) holds ``2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B`` a token, so a 16-token block is 2,097,152 B; the
link is 1 GB/s with 100 us latency, so moving ``k`` blocks takes ``k x 0.002097152 + 0.0001`` s.
"""

from __future__ import annotations

import pytest

from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError, to_toml
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf

BLOCK_S = 0.002097152  #: one block over the 1 GB/s link
LAT_S = 1e-4


def xfer(blocks: int) -> float:
    return blocks * BLOCK_S + LAT_S


def cfg(blocks: int = 1000, **disagg) -> SimConfig:
    d = {"enabled": True, "link": "custom", "link_gbps": 1.0, "link_latency_us": 100.0, **disagg}
    return SimConfig().replace(cache={"num_gpu_blocks": blocks}, workload={"concurrency": 1}, disagg=d)


def perf() -> LinearPerf:
    return LinearPerf(a=0.01, b=0.001)


def test_prefill_on_p_then_transfer_then_decode_on_d() -> None:
    """One call, 100 prompt tokens, 10 output. Prefill instance: 100 tokens in 0.11 s (its token at 0.11, the
    prefill-side TTFT). Hand-off at 0.11: the decode instance allocates slots for 99 tokens (7 blocks) and pulls
    the prompt's 7 blocks: arrives at 0.11 + 7 x 0.002097152 + 0.0001 = 0.124780064. Decode computes the last
    prompt token (0.011 s) and emits the client's first token at 0.135780064 (vLLM's proxies stream the decode
    instance's tokens), then 9 decode steps of 0.011 s: done at 0.234780064."""
    res = simulate(make_trace([[(100, 10, None)]]), cfg(), perf=perf())
    t, s = res.turns, res.summary
    arrive = 0.11 + xfer(7)
    assert arrive == pytest.approx(0.124780064)
    assert t["first_token_s"][0] == pytest.approx(arrive + 0.011)
    assert t["finish_s"][0] == pytest.approx(arrive + 0.011 + 9 * 0.011)
    assert t["instance"][0] == 0  # the prefill instance (decode instances follow the prefill pool)
    d = s["disagg"]
    assert d["kv_bytes_transferred"] == 7 * 2_097_152
    assert d["transfer_s"]["p50"] == pytest.approx(xfer(7))
    assert d["prefill_ttft_s"]["p50"] == pytest.approx(0.11)
    assert d["decode_admit_wait_s"]["p50"] == 0.0
    assert s["output_tokens"] == 10
    assert s["cluster"]["instances"] == 2


def test_prefill_ttft_quantiles_over_the_calls() -> None:
    """Ten one-call programs in turn (one in flight) of 100, 200, ..., 1000 prompt tokens: each prefills alone on
    the prefill instance, its token after 0.01 + 0.001 n s = 0.11, 0.21, ..., 1.01 s. NumPy's linear quantiles:
    p50 at rank 4.5 (0.56), p90 at rank 8.1 (0.91 + 0.1 x 0.1 = 0.92), p99 at rank 8.91 (1.001)."""
    res = simulate(make_trace([[(100 * (k + 1), 2, None)] for k in range(10)]), cfg(), perf=perf())
    q = res.summary["disagg"]["prefill_ttft_s"]
    assert list(q) == ["p50", "p90", "p99"]
    assert q["p50"] == pytest.approx(0.56) and q["p90"] == pytest.approx(0.92) and q["p99"] == pytest.approx(1.001)


def test_decode_admission_waits_for_free_blocks() -> None:
    """8 blocks per instance. A (arrives at 0): 48 prompt tokens, 60 output; B (arrives at 0.5): 48 prompt, 2 output.
    A: prefill 0.058 s; 3 blocks move (0.006391456 s); first token at 0.058 + xfer(3) + 0.011 = 0.075391456; 59
    decode steps: done at 0.724391456, holding 7 blocks (107 computed tokens) by then, and 6 already after its
    token 81 (33 steps in, t ~ 0.44). B prefills on its own pool 0.5 -> 0.558; on the decode instance it needs 3
    blocks for 47 tokens, A holds 6 of 8: B waits until A finishes (0.724391456; its blocks join the free LRU),
    then moves 3 blocks: first token at 0.724391456 + xfer(3) + 0.011, done one step later."""
    trace = make_trace([[(48, 60, None)], [(48, 2, None)]])
    trace.programs["arrival_s"] = [0.0, 0.5]
    c = cfg(blocks=8).replace(workload={"arrival": "trace", "concurrency": 2})
    res = simulate(trace, c, perf=perf())
    t, d = res.turns, res.summary["disagg"]
    a_done = 0.058 + xfer(3) + 0.011 + 59 * 0.011
    assert a_done == pytest.approx(0.724391456)
    assert t["finish_s"][0] == pytest.approx(a_done)
    assert t["first_token_s"][1] == pytest.approx(a_done + xfer(3) + 0.011)
    assert t["finish_s"][1] == pytest.approx(a_done + xfer(3) + 0.022)
    assert t["preemptions"].tolist() == [0, 0]
    assert d["decode_admit_wait_s"]["p99"] == pytest.approx(0.99 * (a_done - 0.558))  # numpy's linear p99 of [0, wait]


@pytest.mark.parametrize("home", ["decode", "none"])
def test_next_turn_pulls_the_cached_prefix_from_the_decode_instance(home: str) -> None:
    """Turn 0: 100 prompt, 40 output, 2 s tool; turn 1: 160 prompt (reuses 140), 5 output.
    Turn 0: prefill 0.11 s (the prefill instance caches 100 // 16 = 6 blocks), 7 blocks move (xfer(7)), first
    token + 39 steps: done at 0.11 + xfer(7) + 0.011 + 39 x 0.011; the decode instance then caches 139 // 16 = 8
    blocks. Turn 1 (released 2 s later) on the prefill instance: 6 blocks hit locally (96 tokens); the trace's
    reuse bounds the hit at 140 // 16 = 8 blocks.
    - session_home "decode": blocks 7-8 come from the decode instance (xfer(2)), 32 tokens computed (0.042 s);
    - "none": 64 tokens computed (0.074 s).
    Either way the decode instance hits its own 8 blocks, needs slots for 159 tokens (10 blocks) and moves the
    prompt's other 2 blocks (xfer(2)); first token 0.011 s after they arrive."""
    trace = make_trace([[(100, 40, 2.0), (160, 5, None)]])
    res = simulate(trace, cfg(session_home=home), perf=perf())
    t, d = res.turns, res.summary["disagg"]
    done0 = 0.11 + xfer(7) + 0.011 + 39 * 0.011
    assert t["finish_s"][0] == pytest.approx(done0)
    assert t["release_s"][1] == pytest.approx(done0 + 2.0)
    assert t["cached_tokens"].tolist() == [0, 96]
    prefill = xfer(2) + 0.042 if home == "decode" else 0.074
    assert t["ttft_s"][1] == pytest.approx(prefill + xfer(2) + 0.011)
    assert t["reloaded_remote_tokens"].tolist() == ([0, 32] if home == "decode" else [0, 0])
    assert d["kv_bytes_pulled"] == (2 * 2_097_152 if home == "decode" else 0)
    assert d["kv_bytes_transferred"] == (7 + 2) * 2_097_152
    assert d["decode_local_hit_tokens"] == 128


def test_two_prefill_one_decode_pools_take_their_own_gpu() -> None:
    """Pool sizes and GPUs reach the cluster: 2 prefill instances then 1 decode instance."""
    c = cfg(prefill_instances=2, decode_instances=1, decode_gpu="h200")
    res = simulate(
        make_trace([[(100, 3, None)], [(100, 3, None)]]), c.replace(workload={"concurrency": 2}), perf=perf()
    )
    per = res.summary["cluster"]["per_instance"]
    assert [p["gpu"] for p in per] == ["h100-sxm", "h100-sxm", "h200"]
    assert sorted(res.turns["instance"].tolist()) == [0, 1]  # least-loaded spreads the two prefills
    assert res.summary["disagg"]["handoffs"] == 2


def test_off_leaves_config_toml_and_summary_unchanged() -> None:
    off = SimConfig()
    assert "[disagg]" not in to_toml(off)
    assert "[disagg]" in to_toml(off.replace(disagg={"enabled": True}))
    res = simulate(make_trace([[(100, 3, None)]]), off.replace(cache={"num_gpu_blocks": 100}), perf=perf())
    assert "disagg" not in res.summary


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("prefill_instances", 0, "[disagg] prefill_instances = 0 is invalid"),
        ("link", "ib", "[disagg] link = 'ib' is invalid"),
        ("session_home", "prefill", "[disagg] session_home = 'prefill'"),
        ("decode_router", "nope", "[disagg] decode_router = 'nope'"),
        ("decode_tp", 3, "[disagg] decode_tp = 3"),
    ],
)
def test_bad_values_name_section_field_and_value(field: str, value: object, words: str) -> None:
    with pytest.raises(ConfigError) as exc:
        SimConfig().replace(disagg={field: value})
    assert words in str(exc.value)


def test_custom_link_needs_a_bandwidth() -> None:
    with pytest.raises(ConfigError, match=r"\[disagg\] link_gbps = 0.0 is invalid"):
        SimConfig().replace(disagg={"link": "custom"})


def test_fast_decode_runs_equal_step_by_step_under_hand_offs() -> None:
    """Hand-offs allocate on a decode instance mid-run (after syncing the run's blocks): the result equals a
    step-by-step replay, preemptions and admission waits included."""
    trace = make_trace(
        [[(200 + 40 * p, 30 + 7 * p, 0.05 * p), (300 + 40 * p, 25, 0.1), (420 + 40 * p, 20, None)] for p in range(5)]
    )
    c = cfg(blocks=60, decode_instances=2).replace(workload={"concurrency": 5})
    fast = simulate(trace, c, perf=perf())
    slow = simulate(trace, c.replace(scheduler={"fast_decode": False}), perf=perf())
    for col in ("first_token_s", "finish_s", "cached_tokens", "reloaded_remote_tokens", "preemptions"):
        assert fast.turns[col].tolist() == slow.turns[col].tolist(), col
    assert fast.summary["disagg"] == slow.summary["disagg"]
    assert fast.summary["disagg"]["decode_admit_wait_s"]["p99"] > 0  # some hand-off waited for blocks


def test_link_bandwidth_per_receiving_instance() -> None:
    """rdma: 50 GB/s per GPU; nvlink: the catalogue's per-GPU NVLink figure (H100 SXM 450 GB/s); custom: as given."""
    from agentreplay.features.disagg.config import DisaggConfig
    from agentreplay.features.disagg.disagg import link_gbps
    from agentreplay.perf import load_gpu

    assert link_gbps(DisaggConfig(), "h100-sxm", 4) == 200.0
    nv = load_gpu("h100-sxm").interconnect_bw_gbps
    assert link_gbps(DisaggConfig(link="nvlink"), "h100-sxm", 2) == 2 * nv
    assert link_gbps(DisaggConfig(link="custom", link_gbps=12.5), "h100-sxm", 8) == 12.5


def test_first_token_from_the_prefill_instance() -> None:
    """``first_token = "prefill"``: the client's first token is the prefill's (0.11 s); the decode instance gets
    prompt + that token (101 tokens), loads the prefill's 100 tokens (7 blocks, arriving at 0.124780064), computes
    the 101st (0.011 s) and emits token 2, then 8 more steps: done at 0.124780064 + 0.011 + 8 x 0.011. A one-token
    call ends at the prefill instance."""
    res = simulate(make_trace([[(100, 10, None)], [(50, 1, None)]]), cfg(first_token="prefill"), perf=perf())
    t, d = res.turns, res.summary["disagg"]
    arrive = 0.11 + xfer(7)
    assert t["first_token_s"][0] == pytest.approx(0.11)
    assert t["finish_s"][0] == pytest.approx(arrive + 0.011 + 8 * 0.011)
    assert t["ttft_s"][1] == pytest.approx(0.06) and t["finish_s"][1] == t["first_token_s"][1]
    assert d["handoffs"] == 1 and d["kv_bytes_transferred"] == 7 * 2_097_152
    assert res.summary["output_tokens"] == 11
