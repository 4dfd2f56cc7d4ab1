"""The live driver against the fake server: prompt structure, forced lengths, arrivals, tool gaps, retries,
clear errors, partial runs and the measured schema of what it writes."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from agentreplay.sim.config import ToolConfig, WorkloadConfig
from agentreplay.sim.workload import compile_trace
from collectors.live.client import DriveError, EndpointRejected, EndpointUnavailable
from collectors.live.driver import drive_async
from collectors.live.endpoint import DriveOptions
from collectors.measured.common import validate_measured
from collectors.measured.schema import TABLES
from tests.collectors.live.fake_server import FakeServer
from tests.factories import make_trace

FAST = ToolConfig(mode="fixed", fixed_s=0.0)
PREFIX = 16


def trace_with_structure():
    """Three programs: growing contexts, a turn shorter than the previous context (prompt fully reused) and, in
    program 1, a compaction turn whose trace reuse (4) is below the shared prefix."""
    tr = make_trace([[(40, 5, 0.01), (60, 4, 0.01), (50, 3, 0.01), (90, 2, None)]] * 3, shared_prefix_tokens=PREFIX)
    turns = tr.turns.copy()
    turns.loc[(turns["program_id"] == "p1") & (turns["turn_idx"] == 3), "reused_tokens"] = 4
    return type(tr)(tr.programs, turns)


def opts(**kw) -> DriveOptions:
    return DriveOptions(**{"metrics_interval_s": 0.0, "backoff_s": 0.01, **kw})


async def run_drive(
    srv: FakeServer, trace, out: Path, cfg: WorkloadConfig | None = None, tools: ToolConfig = FAST, **kw
):
    return await drive_async(srv.url, trace, cfg or WorkloadConfig(concurrency=1), out, tools=tools, options=opts(**kw))


def read_dir(out: Path) -> dict[str, pd.DataFrame]:
    return {p.stem: pq.read_table(p).to_pandas() for p in sorted(out.glob("*.parquet"))}


def test_prompts_reproduce_reuse_and_shared_prefix_and_outputs_are_forced(tmp_path) -> None:
    tr = trace_with_structure()
    w = compile_trace(tr)

    async def go():
        async with FakeServer(natural_len=1) as srv:  # would stop after 1 token unless forced
            res = await run_drive(srv, tr, tmp_path)
            return srv, res

    srv, res = asyncio.run(go())
    seen = srv.turns
    assert len(seen) == w.n_turns  # concurrency 1: programs in order, turns in order
    for g, s in enumerate(seen):
        p = int(np.searchsorted(w.turn_start, g, side="right") - 1)
        t = g - int(w.turn_start[p])
        assert len(s.tokens) == w.input_tokens[g]
        assert s.body["max_tokens"] == s.body["min_tokens"] == w.output_tokens[g] and s.body["ignore_eos"]
        assert len(s.output) == w.output_tokens[g]
        if t == 0:
            assert s.lcp == (0 if p == 0 else PREFIX)
        else:
            prev_ctx = int(w.input_tokens[g - 1] + w.output_tokens[g - 1])
            expect = min(max(int(w.reused_tokens[g]), PREFIX), int(w.input_tokens[g]), prev_ctx)
            assert s.lcp == expect, (p, t)
    assert seen[w.turn_start[1] + 3].lcp == PREFIX  # compaction turn keeps only the shared prefix
    assert seen[2].lcp == 50  # shorter than the previous context: fully reused
    turns = res.turns
    assert (turns["output_tokens_reported"] == turns["output_tokens"]).all()
    assert (turns["output_ids_source"] == "server").all()
    assert res.info.prompt_format == "ids" and res.info.returns_token_ids


def test_unforced_outputs_stop_early_when_extensions_are_off(tmp_path) -> None:
    async def go():
        async with FakeServer(natural_len=1) as srv:
            return await run_drive(srv, make_trace([[(30, 6, None)]]), tmp_path, ignore_eos=False, min_tokens=False)

    res = asyncio.run(go())
    assert res.turns["output_tokens_reported"].tolist() == [1]
    assert any("ignore_eos" in n for n in res.info.notes)


def test_closed_loop_keeps_n_programs_in_flight(tmp_path) -> None:
    tr = make_trace([[(20, 3, 0.0), (30, 3, None)]] * 7)

    async def go():
        async with FakeServer(ttft_s=0.02) as srv:
            await run_drive(srv, tr, tmp_path, cfg=WorkloadConfig(concurrency=3))
            return srv

    srv = asyncio.run(go())
    assert srv.max_in_flight == 3
    assert len(srv.turns) == 14


def test_tool_gaps_are_slept_before_the_next_release(tmp_path) -> None:
    tr = make_trace([[(20, 2, 0.03), (30, 2, 0.01), (40, 2, None)]] * 2)

    async def go(tools):
        async with FakeServer() as srv:
            return await run_drive(srv, tr, tmp_path / tools.mode, cfg=WorkloadConfig(concurrency=2), tools=tools)

    for tools, gaps in (
        (ToolConfig(mode="fixed", fixed_s=0.01), [0.01, 0.01]),
        (ToolConfig(mode="replay"), [0.03, 0.01]),
        (ToolConfig(mode="scale", scale=0.5), [0.015, 0.005]),
    ):
        t = asyncio.run(go(tools)).turns
        for _, prog in t.groupby("program_id"):
            prog = prog.sort_values("turn_idx")
            waited = prog["release_s"].to_numpy()[1:] - prog["last_token_s"].to_numpy()[:-1]
            assert (waited >= np.array(gaps) - 1e-4).all(), (tools, waited)
            assert (waited < np.array(gaps) + 0.05).all(), (tools, waited)
            assert np.allclose(prog["tool_gap_s"].to_numpy()[:-1], gaps)


def test_poisson_and_trace_arrivals_follow_the_simulator_schedule(tmp_path) -> None:
    tr = make_trace([[(20, 2, None)]] * 4)
    tr.programs["arrival_s"] = [10.0, 10.05, 10.02, 10.1]

    async def go(cfg):
        async with FakeServer() as srv:
            return await run_drive(srv, tr, tmp_path / cfg.arrival, cfg=cfg, seed=7)

    gaps = np.random.default_rng(np.random.SeedSequence(7).spawn(2)[0]).exponential(1 / 40.0, size=4)
    for cfg, expect in (
        (WorkloadConfig(arrival="poisson", rate_per_s=40.0), np.cumsum(gaps) - gaps[0]),
        (WorkloadConfig(arrival="trace"), np.array([0.0, 0.05, 0.02, 0.1])),
    ):
        t = asyncio.run(go(cfg)).turns.sort_values("program_id")
        got = t["release_s"].to_numpy() - t["release_s"].min()
        assert np.allclose(got, expect - expect.min(), atol=0.015), (cfg.arrival, got, expect)


@pytest.mark.parametrize("kind", ["503", "drop"])
def test_a_retried_turn_is_recorded_once_with_its_retries(tmp_path, kind) -> None:
    tr = make_trace([[(20, 3, 0.0), (30, 7, 0.0), (40, 3, None)]])

    async def go():
        async with FakeServer() as srv:
            srv.inject(kind, where=lambda body: body["max_tokens"] == 7)
            return srv, await run_drive(srv, tr, tmp_path)

    srv, res = asyncio.run(go())
    assert [s.failed for s in srv.seen if s.body["max_tokens"] == 7] == [kind, None]
    assert res.turns["retries"].tolist() == [0, 1, 0]
    assert len(res.tables["requests"]) == 3
    row = res.turns.iloc[1]
    assert row["first_send_s"] < row["send_s"] <= row["first_token_s"]
    assert res.tables["metrics"].set_index("metric").loc["retries_total", "value"] == 1


def test_unreachable_endpoint_is_a_clear_error(tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(EndpointUnavailable, match=rf"cannot reach {url}/v1/models"):
        asyncio.run(drive_async(url, make_trace([[(20, 2, None)]]), None, tmp_path / "o", tools=FAST))
    assert not (tmp_path / "o").exists()


def test_rejected_token_ids_without_fallback_is_a_clear_error(tmp_path) -> None:
    async def go():
        async with FakeServer(accept_ids=False) as srv:
            await run_drive(srv, make_trace([[(20, 2, None)]]), tmp_path / "o", prompt_format="ids")

    with pytest.raises(EndpointRejected, match=r"/v1/completions rejected the request: HTTP 400: .*must be a string"):
        asyncio.run(go())
    assert not (tmp_path / "o").exists()


def test_text_prompts_when_ids_are_refused(tmp_path) -> None:
    tr = make_trace([[(30, 3, 0.0), (50, 2, None)]] * 2, shared_prefix_tokens=8)

    async def go():
        async with FakeServer(accept_ids=False) as srv:
            return srv, await run_drive(srv, tr, tmp_path)

    srv, res = asyncio.run(go())
    assert res.info.prompt_format == "text" and res.info.notes
    assert [len(s.tokens) for s in srv.turns] == [30, 50, 30, 50]
    assert srv.turns[2].lcp == 8  # shared prefix across programs, at word level
    assert (res.turns["output_ids_source"] == "placeholder").all()


def test_placeholder_output_ids_when_the_server_returns_none(tmp_path) -> None:
    tr = make_trace([[(30, 5, 0.0), (50, 2, None)]])

    async def go():
        async with FakeServer(return_ids=False) as srv:
            return srv, await run_drive(srv, tr, tmp_path)

    srv, res = asyncio.run(go())
    assert srv.turns[1].lcp == 30  # the engine can reuse only the previous prompt
    assert res.turns["output_ids_source"].tolist() == ["placeholder"] * 2


def test_4xx_on_a_turn_is_a_clear_error_and_writes_a_partial_dataset(tmp_path) -> None:
    tr = make_trace([[(20, 3, 0.0), (30, 5, None)], [(20, 3, 0.0), (30, 7, None)]])

    async def go():
        async with FakeServer() as srv:
            srv.inject("400", where=lambda body: body["max_tokens"] == 7)
            await run_drive(srv, tr, tmp_path)

    with pytest.raises(EndpointRejected, match=r"HTTP 400: .*injected 400") as exc:
        asyncio.run(go())
    assert "/v1/completions" in str(exc.value) and exc.value.status == 400
    got = read_dir(tmp_path)
    cfg = json.loads(got["cells"]["config_json"].iloc[0])
    assert cfg["partial"] is True and "HTTP 400" in cfg["error"]
    assert got["programs"]["program_id"].tolist() == ["p0"]
    assert got["requests"]["request_id"].tolist() == ["p0#0", "p0#1", "p1#0"]


def test_cancelled_run_writes_a_valid_partial_dataset(tmp_path) -> None:
    tr = make_trace([[(20, 2, 0.0), (30, 2, 0.0), (40, 2, None)]] * 6)

    async def go():
        me = asyncio.current_task()

        def progress(done: int, total: int) -> None:
            if done == 2:
                me.cancel()

        async with FakeServer() as srv:
            await drive_async(
                srv.url, tr, WorkloadConfig(concurrency=1), tmp_path, tools=FAST, options=opts(), progress=progress
            )

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(go())
    got = read_dir(tmp_path)
    assert not list(tmp_path.glob(".*"))  # no temporaries left
    validate_measured({k: v for k, v in got.items() if k in TABLES})
    cfg = json.loads(got["cells"]["config_json"].iloc[0])
    assert cfg["partial"] is True and cfg["error"] == "interrupted"
    m = got["metrics"].set_index("metric")["value"]
    assert m["completed_programs"] == 2 and m["programs_planned"] == 6
    assert len(got["programs"]) == 2 and len(got["requests"]) == 6


def test_outputs_match_the_measured_schema_and_engine_counters(tmp_path) -> None:
    tr = make_trace([[(40, 5, 0.0), (60, 4, 0.0), (80, 3, None)]] * 3, shared_prefix_tokens=PREFIX)

    async def go():
        async with FakeServer() as srv:
            res = await run_drive(
                srv,
                tr,
                tmp_path,
                cfg=WorkloadConfig(concurrency=2),
                token_scale=0.5,
                metrics_interval_s=0.005,
                gpu="NVIDIA H100 80GB HBM3",
                tp=1,
            )
            return srv, res

    srv, _ = asyncio.run(go())
    for name, schema in TABLES.items():
        path = tmp_path / f"{name}.parquet"
        if name in ("component", "peers"):  # a live run times no operator and has no other simulator's prediction
            assert not path.exists()
            continue
        assert pq.read_schema(path).remove_metadata() == schema
    got = read_dir(tmp_path)
    validate_measured({k: v for k, v in got.items() if k in TABLES})
    cell = got["cells"].iloc[0]
    assert cell["kind"] == "end-to-end" and cell["engine"] == "vllm" and cell["gpu"] == "h100-sxm"
    assert cell["cell_id"] == "live/h100-sxm/fake-model-1b/closed-2-in-flight"
    cfg = json.loads(cell["config_json"])
    assert cfg["partial"] is False and cfg["token_scale"] == 0.5
    assert cfg["engine"]["num_gpu_blocks"] == 4096 and cfg["engine"]["block_size"] == 16
    assert got["requests"]["input_tokens"].tolist() == [20, 30, 40] * 3
    m = got["metrics"].set_index("metric")["value"]
    assert m["prefix_cache_hit_tokens"] == sum(s.lcp for s in srv.turns)
    assert m["prefix_cache_query_tokens"] == sum(len(s.tokens) for s in srv.turns)
    assert m["preemptions"] == 0 and m["completed_programs"] == 3 and "kv_cache_usage_max" in m
    req = got["requests"]
    assert (
        (req["arrival_s"] <= req["scheduled_s"])
        & (req["scheduled_s"] <= req["first_token_s"])
        & (req["first_token_s"] <= req["last_token_s"])
    ).all()
    jct = got["programs"].set_index("program_id")["jct_s"]
    last = req.assign(p=req["request_id"].str.split("#").str[0]).groupby("p")
    assert np.allclose(jct, last["last_token_s"].max() - last["arrival_s"].min())


def test_turns_that_do_not_fit_the_context_fail_before_the_run(tmp_path) -> None:
    async def go():
        async with FakeServer(max_model_len=64) as srv:
            await run_drive(srv, make_trace([[(60, 10, None)]]), tmp_path / "o")
            return srv

    with pytest.raises(DriveError, match=r"needs 70 tokens .* max_model_len is 64; use --token-scale"):
        asyncio.run(go())


def test_request_timeout_is_retried_then_reported(tmp_path) -> None:
    async def go():
        async with FakeServer(ttft_s=1.0) as srv:
            await run_drive(srv, make_trace([[(20, 2, None)]]), tmp_path / "o", timeout_s=0.05, max_retries=1)

    with pytest.raises(EndpointUnavailable, match=r"failed after 2 attempt\(s\): no complete answer within 0.05 s"):
        asyncio.run(go())
