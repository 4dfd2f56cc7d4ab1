"""Replica failures and drains under disaggregated prefill / decode (agentreplay.features.failover with
agentreplay.features.disagg), replayed by hand with the linear pricer and link of
tests/features/disagg/test_disagg.py: an iteration of ``n`` tokens costs ``0.01 + 0.001 n`` s, a decode step alone
0.011 s; ``k`` blocks move in ``xfer(k)``.

Cluster indices: the prefill pool first, then the decode pool. Program ``TWO``: turn 0 (100 prompt, 10 output,
1 s tool), turn 1 (160 prompt, 5 output). Without failures, turn 0 prefills 0 -> 0.11 (its KV then cached on the
prefill instance: 6 full blocks, 96 tokens), moves 7 blocks to decode instance 1 (arrive 0.11 + xfer(7) =
0.124780064), emits its first token at 0.135780064 and one every 0.011 s: done at 0.234780064.
"""

from __future__ import annotations

import pytest

from agentreplay.sim import simulate
from tests.factories import make_trace
from tests.features.disagg.test_disagg import cfg, perf, xfer

TWO = [[(100, 10, 1.0), (160, 5, None)]]
ARRIVE0 = 0.11 + xfer(7)


def _run(programs, events, **disagg):
    c = cfg(**disagg).replace(failures={"events": events})
    return simulate(make_trace(programs), c, perf=perf())


def test_a_decode_instance_failure_fails_the_call_whole_and_the_client_retries_it() -> None:
    """Decode instance 1 fails at 0.17, when turn 0 has emitted 4 tokens (0.1358, 0.1468, 0.1578, 0.1688): 103
    tokens of KV and 4 output tokens lost. The proxy's call fails, so the client retries it: a new prefill on the
    prefill instance at 0.17 hits its 96 cached tokens and computes 4 (0.014 s: token at 0.184), then hands off
    to decode instance 2, which caches nothing: 7 blocks move, first token at 0.184 + xfer(7) + 0.011 =
    0.209780064, done 9 steps later at 0.308780064. The ledger's re-prefill is the retry's computed prompt, 4."""
    res = _run(TWO, [{"instance": 1, "at_s": 0.17, "kind": "fail"}], decode_instances=2)
    t, s = res.turns, res.summary
    first = 0.184 + xfer(7) + 0.011
    assert first == pytest.approx(0.209780064)
    assert t["first_token_s"][0] == pytest.approx(first)
    assert t["finish_s"][0] == pytest.approx(first + 9 * 0.011)
    assert t["cached_tokens"][0] == 96 and t["output_tokens"][0] == 10
    assert t["release_s"][1] == pytest.approx(first + 9 * 0.011 + 1.0)  # turn 1 follows as usual
    assert s["disagg"]["handoffs"] == 3 and s["disagg"]["kv_bytes_transferred"] >= 14 * 2_097_152
    ledger = res.tables()["failover"].to_pandas()
    assert ledger[["event", "state", "instance", "turn"]].values.tolist() == [["fail", "running", 1, 0]]
    assert ledger[["lost_kv_tokens", "lost_output_tokens", "reprefill_tokens"]].values.tolist() == [[103, 4, 4]]
    assert s["failover"]["aborted_calls"] == 1 and s["failover"]["events"][0]["aborted"] == 1


def test_a_prefill_instance_failure_retries_the_call_with_its_output_length() -> None:
    """Two prefill instances, one decode instance; one call (100 prompt, 10 output). Prefill instance 0 fails at
    0.05, mid-prefill: the retry prefills on instance 1 from 0.05 (0.11 s: token at 0.16), hands off (7 blocks),
    first token at 0.16 + xfer(7) + 0.011 and all 10 output tokens of the call, not the prefill's one."""
    res = _run(
        [[(100, 10, None)]], [{"instance": 0, "at_s": 0.05, "kind": "fail"}], prefill_instances=2, decode_instances=1
    )
    t, s = res.turns, res.summary
    first = 0.16 + xfer(7) + 0.011
    assert t["instance"][0] == 1
    assert t["first_token_s"][0] == pytest.approx(first)
    assert t["finish_s"][0] == pytest.approx(first + 9 * 0.011)
    assert s["output_tokens"] == 10 and s["disagg"]["handoffs"] == 1
    ledger = res.tables()["failover"].to_pandas()
    assert ledger[["state", "instance", "lost_kv_tokens", "lost_output_tokens"]].values.tolist() == [
        ["running", 0, 0, 0]
    ]


def test_a_draining_decode_instance_finishes_its_call_then_the_next_decodes_elsewhere() -> None:
    """Decode instance 1 drains at 0.15: it finishes turn 0 (0.234780064, 109 tokens computed: 6 full blocks,
    96 tokens, cached there) and goes down. Turn 1 (released 1 s later) prefills on the prefill instance and
    hands off to decode instance 2, which caches nothing of it: all 10 blocks of its 159 tokens move. The ledger
    has the drained context of program 0's next call, moved again rather than re-prefilled."""
    res = _run(TWO, [{"instance": 1, "at_s": 0.15, "kind": "drain"}], decode_instances=2)
    t, s = res.turns, res.summary
    done0 = ARRIVE0 + 0.011 + 9 * 0.011
    assert t["finish_s"][0] == pytest.approx(done0)
    events = [(e["event"], e["instance"], e["t_s"]) for e in s["failover"]["events"]]
    assert events == [("drain", 1, 0.15), ("drained", 1, pytest.approx(done0))]
    assert s["disagg"]["decode_local_hit_tokens"] == 0
    assert s["disagg"]["kv_bytes_transferred"] == (7 + 10) * 2_097_152
    ledger = res.tables()["failover"].to_pandas()
    assert ledger[["event", "state", "instance", "turn", "lost_kv_tokens", "reprefill_tokens"]].values.tolist() == [
        ["drain", "idle", 1, 1, 96, 0]  # (turn 1's prefill is what it would have been; its hand-off moves more)
    ]


def test_without_a_decode_instance_up_the_hand_off_waits_for_one_to_recover() -> None:
    """The only decode instance fails at 0.05 and recovers at 1.05: the prefill (done at 0.11) waits, then its
    7 blocks move: first token at 1.05 + xfer(7) + 0.011. Without a recovery the run stops with a clear error."""
    one = [[(100, 10, None)]]
    res = _run(one, [{"instance": 1, "at_s": 0.05, "kind": "fail", "recover_after_s": 1.0}])
    first = 1.05 + xfer(7) + 0.011
    assert res.turns["first_token_s"][0] == pytest.approx(first)
    assert res.turns["finish_s"][0] == pytest.approx(first + 9 * 0.011)
    assert res.summary["disagg"]["decode_admit_wait_s"]["p50"] == pytest.approx(1.05 - 0.11)
    assert res.summary["failover"]["affected_calls"] == 0
    with pytest.raises(RuntimeError, match=r"every decode instance is down at t = 0\.110 s and none recovers"):
        _run(one, [{"instance": 1, "at_s": 0.05, "kind": "fail"}])


def test_a_transfer_to_a_failed_decode_instance_stops_and_frees_the_link() -> None:
    """Decode instance 1 fails at 0.115, while turn 0's 7 blocks are on their way (0.11 -> 0.124780064): the
    transfer stops (nothing arrives at the failed instance) and the retry's hand-off to instance 2 moves its 7
    blocks over instance 2's own link: prefill again 0.115 -> 0.129 (96 tokens cached, 4 computed), first token at
    0.129 + xfer(7) + 0.011. Turn 1 then finds 6 blocks on instance 2 and moves 4 (xfer(4)): two arrivals are
    timed, the stopped transfer is not (its 7 blocks stay counted as sent)."""
    res = _run(TWO, [{"instance": 1, "at_s": 0.115, "kind": "fail"}], decode_instances=2)
    first = 0.129 + xfer(7) + 0.011
    assert res.turns["first_token_s"][0] == pytest.approx(first)
    ledger = res.tables()["failover"].to_pandas()
    assert ledger[["state", "lost_output_tokens"]].values.tolist() == [["waiting", 0]]
    d = res.summary["disagg"]
    assert d["transfer_s"]["mean"] == pytest.approx((xfer(7) + xfer(4)) / 2)
    assert d["kv_bytes_transferred"] == (7 + 7 + 4) * 2_097_152


def test_random_failures_of_both_pools_finish_every_program_and_leave_nothing_in_flight() -> None:
    """MTBF failures on a 2 + 2 cluster with 12 programs of 4 turns: every program finishes, every turn has all
    its output tokens, and the run's end check (no hand-off left in flight) passes."""
    programs = [[(200 + 50 * t, 8, 0.3) for t in range(3)] + [(400, 8, None)] for _ in range(12)]
    c = cfg(prefill_instances=2, decode_instances=2).replace(
        failures={"mtbf_s": 0.5, "mttr_s": 0.2}, workload={"concurrency": 6}
    )
    res = simulate(make_trace(programs), c, perf=perf())
    s = res.summary
    assert s["programs"] == 12 and s["output_tokens"] == 12 * 4 * 8
    assert s["failover"]["aborted_calls"] > 0
    assert {e["instance"] for e in s["failover"]["events"] if e["event"] == "random"} >= {0, 2}
