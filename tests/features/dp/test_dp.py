"""DP ranks as vLLM runs them: the front-end balancer, lockstep steps of a MoE group, independent dense ranks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentreplay.engine import Engine
from agentreplay.kv.manager import KVManager
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.perf import PerfModel
from agentreplay.perf.catalog import load_gpu, load_model
from agentreplay.perf.parallel import DPStepPricer, EPComm
from agentreplay.request import Request
from agentreplay.router.policies import VllmDP
from agentreplay.scheduler.scheduler import Scheduler
from agentreplay.sim.config import ConfigError, HardwareConfig, SimConfig
from agentreplay.sim.instance import Instance
from agentreplay.sim.run import simulate
from tests.factories import make_request
from tests.sim.fakes import LinearPerf
from validation.e2e.common import single_turn_trace


def _trace(prompts: list[int], outs: list[int], model: str = "qwen3-30b-a3b"):
    n = len(prompts)
    return single_turn_trace([f"r{i}" for i in range(n)], np.zeros(n), np.array(prompts), np.array(outs), model)


def _cfg(model: str = "qwen3-30b-a3b", **hw) -> SimConfig:
    return SimConfig().replace(
        hardware={"gpu": "h100-sxm", "model": model, **hw}, router={"policy": "vllm-dp"}, workload={"arrival": "trace"}
    )


def _req(i: int) -> Request:
    return make_request(i, 10)


def _rank(waiting: int, running: int, used: int = 0, blocks: int = 100) -> Instance:
    pool = SegmentPool(blocks, 16)
    pool.allocate(used)
    inst = Instance(0, Engine(), LinearPerf(), Scheduler(KVManager(pool), 8, 64), lambda r: None)
    inst.sched.waiting.extend(_req(i) for i in range(waiting))
    inst.sched.running.extend(_req(i) for i in range(running))
    return inst


def test_vllm_dp_balancer_scores_and_rotates() -> None:
    r = VllmDP()
    idle = [_rank(0, 0), _rank(0, 0), _rank(0, 0)]
    # equal scores: the scan start rotates, so a burst goes round-robin
    assert [r.pick(_req(0), idle, 0.0) for _ in range(4)] == [0, 1, 2, 0]
    r = VllmDP()
    # rank 0: 2 waiting at 100% KV -> 2 + 2 * 6 * 0.5 = 8; rank 1: 5 running -> 5; rank 2: 1 waiting at 50% -> 1
    ranks = [_rank(2, 0, used=100), _rank(0, 5), _rank(1, 0, used=50)]
    assert r.pick(_req(0), ranks, 0.0) == 2
    assert r.pick(_req(0), ranks[:2], 0.0) == 1


def test_lockstep_first_step_is_the_slower_rank() -> None:
    """Two requests at t=0 go one to each rank; both first tokens come at the end of the first group step,
    priced as the slower rank's prefill with the experts shared and dispatch / combine on the link."""
    res = simulate(_trace([2000, 16], [4, 4]), _cfg(dp=2, ep=True))
    t = res.turns.sort_values("program_id")
    base = PerfModel.from_names("h100-sxm", "qwen3-30b-a3b")
    comm = EPComm.build(load_gpu("h100-sxm"), load_model("qwen3-30b-a3b"), 2, 1, "allgather_reducescatter")
    first = DPStepPricer(base, comm).step_time_s([([(2000, 0, True)], []), ([(16, 0, True)], [])])
    assert t["ttft_s"].to_numpy() == pytest.approx([first, first], rel=1e-9)
    # alone on one engine the short request would have its first token far sooner
    alone = simulate(
        _trace([16], [4]),
        SimConfig().replace(hardware={"gpu": "h100-sxm", "model": "qwen3-30b-a3b"}, workload={"arrival": "trace"}),
    )
    assert float(alone.turns["ttft_s"].iloc[0]) < 0.5 * first
    s = res.summary
    assert s["cluster"]["lockstep"] and s["cluster"]["instances"] == 2 and s["cluster"]["ep"]
    g = s["dp_group"]
    # both requests decode 3 more tokens; the short one's rank steps along every time: 4 steps, no dummies
    assert g["steps"] == 4 and g["dummy_rank_steps"] == 0 and g["comm_s"] > 0


def test_lockstep_idle_rank_runs_the_dummy_batch() -> None:
    res = simulate(_trace([100, 100], [2, 40]), _cfg(dp=2, ep=True))
    g = res.summary["dp_group"]
    # rank 0 finishes after 2 steps; rank 1 runs 40 steps, rank 0 joins the last 38 with the dummy batch
    assert g["steps"] == 40 and g["dummy_rank_steps"] == 38


def test_lockstep_group_speculates() -> None:
    """n-gram drafts, k = 3, every draft accepted (4 tokens a step): rank 1's 39 decode tokens take 10
    verification steps after its prefill, rank 0's one token 1; the group steps 11 times, rank 0 idles 9 (the
    dummy batch), and each decode runs 4 tokens through the dispatch."""
    spec = {"method": "ngram", "num_speculative_tokens": 3, "acceptance": 1.0}
    res = simulate(_trace([100, 100], [2, 40]), _cfg(dp=2, ep=True).replace(speculative=spec))
    g = res.summary["dp_group"]
    assert g["steps"] == 11 and g["dummy_rank_steps"] == 9
    assert res.summary["speculative"]["verification_steps"] == 11
    plain = simulate(_trace([100, 100], [2, 40]), _cfg(dp=2, ep=True)).summary["dp_group"]
    # per step, the group's dispatch carries more tokens than without drafts
    assert g["comm_s"] / g["steps"] > plain["comm_s"] / plain["steps"]


def test_dense_dp_ranks_are_independent() -> None:
    res = simulate(_trace([2000, 16], [4, 4], "llama-3.1-8b"), _cfg("llama-3.1-8b", dp=2))
    alone = simulate(
        _trace([16], [4], "llama-3.1-8b"),
        SimConfig().replace(hardware={"gpu": "h100-sxm", "model": "llama-3.1-8b"}, workload={"arrival": "trace"}),
    )
    t = res.turns.sort_values("program_id")
    assert float(t["ttft_s"].iloc[1]) == pytest.approx(float(alone.turns["ttft_s"].iloc[0]), rel=1e-12)
    assert not res.summary["cluster"]["lockstep"] and "dp_group" not in res.summary


def test_ep_ranks_hold_more_kv_than_tp_only() -> None:
    one = simulate(
        _trace([16], [2]),
        SimConfig().replace(hardware={"gpu": "h100-sxm", "model": "qwen3-30b-a3b"}, workload={"arrival": "trace"}),
    )
    two = simulate(_trace([16], [2]), _cfg(dp=2, ep=True))
    assert two.summary["cluster"]["num_gpu_blocks"] > one.summary["cluster"]["num_gpu_blocks"]
    assert "experts over 2 ranks" in two.summary["cluster"]["kv_blocks_from"]


def test_invalid_combinations_fail_clearly() -> None:
    with pytest.raises(ConfigError, match="needs a MoE model"):
        simulate(_trace([16], [2], "llama-3.1-8b"), _cfg("llama-3.1-8b", dp=2, ep=True))
    with pytest.raises(ConfigError, match=r"\[hardware\] ep"):
        HardwareConfig(ep=True)
    with pytest.raises(ConfigError, match=r"\[hardware\] dp"):
        HardwareConfig(dp=2, instances=2)
    with pytest.raises(ConfigError, match="all2all_backend"):
        HardwareConfig(dp=2, all2all_backend="pplx")  # type: ignore[arg-type]


def test_tp2_dp2_all_to_all_backend_runs_and_prices_the_link() -> None:
    res = simulate(_trace([300, 200, 100], [8, 8, 8]), _cfg(dp=2, ep=True, tp=2, all2all_backend="deepep_low_latency"))
    c, g = res.summary["cluster"], res.summary["dp_group"]
    assert c["tp"] == 2 and c["dp"] == 2 and c["all2all_backend"] == "deepep_low_latency"
    assert 0 < g["comm_s"] < g["busy_s"]
    assert res.turns["finish_s"].notna().all()


def test_config_round_trips_through_toml_and_cli(tmp_path) -> None:
    from typer.testing import CliRunner

    from agentreplay.cli import app
    from agentreplay.sim.config import load, to_toml

    cfg = _cfg(dp=2, ep=True, all2all_backend="deepep_high_throughput")
    (tmp_path / "c.toml").write_text(to_toml(cfg))
    assert load(tmp_path / "c.toml") == cfg
    trace_dir = tmp_path / "trace"
    from agentreplay.trace.io import write_trace

    write_trace(trace_dir, _trace([100, 50], [4, 4]))
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace_dir),
            "--out",
            str(tmp_path / "o"),
            "--gpu",
            "h100-sxm",
            "--model",
            "qwen3-30b-a3b",
            "--dp",
            "2",
            "--ep",
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["cluster"]["ep"] and summary["cluster"]["lockstep"] and summary["policy"]["router"] == "vllm-dp"
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace_dir),
            "--out",
            str(tmp_path / "o"),
            "--gpu",
            "h100-sxm",
            "--model",
            "llama-3.1-8b",
            "--dp",
            "2",
            "--ep",
            "--quiet",
        ],
    )
    assert r.exit_code != 0 and "needs a MoE model" in r.output


def test_a_failed_rank_takes_the_whole_lockstep_deployment_down() -> None:
    """DP 2 + EP: rank 0 fails mid-decode; vLLM's client dies with any engine core, so both ranks' calls are
    aborted and held (no rank is up), both ranks recover together and the calls re-prefill from scratch."""
    fail = {"events": [{"instance": 0, "at_s": 0.3, "kind": "fail", "recover_after_s": 1.0}]}
    trace = _trace([100, 100], [40, 40])
    res = simulate(trace, _cfg(dp=2, ep=True).replace(failures=fail))
    fo = res.summary["failover"]
    assert [(e["instance"], e["event"]) for e in fo["events"]] == [
        (0, "fail"),
        (1, "fail"),
        (0, "recover"),
        (1, "recover"),
    ]
    assert fo["aborted_calls"] == 2 and fo["held_calls"] == 2
    # nothing finishes before the repair at 1.3 s, and each retry prefills its whole prompt again
    assert (res.turns["finish_s"] > 1.3).all()
    ledger = res.tables()["failover"].to_pydict()
    assert ledger["instance"] == [0, 1] and ledger["state"] == ["running", "running"]
    assert ledger["reprefill_tokens"] == [100, 100] and all(n > 0 for n in ledger["lost_output_tokens"])
