"""The iteration profiler against the fake server, and the ``drive`` / ``drive-profile`` commands."""

from __future__ import annotations

import asyncio
import json
import socket

import pandas as pd
import pyarrow.parquet as pq
from typer.testing import CliRunner

import agentreplay.cli.drive  # noqa: F401  (registers the commands until app.py imports it)
from agentreplay.cli import app
from agentreplay.trace.io import write_trace
from collectors.live.client import StreamResult
from collectors.live.endpoint import DriveOptions
from collectors.live.profile import ProfileOptions, decode_step_s, profile_async
from collectors.measured.schema import TABLES
from tests.collectors.live.fake_server import FakeServer, ThreadedFakeServer
from tests.factories import make_trace

runner = CliRunner()


def test_profile_measures_prefill_and_decode_iterations(tmp_path) -> None:
    prof = ProfileOptions(
        prefill_sizes=(16, 512, 2000, 4096), repeats=3, batch_sizes=(1, 4), contexts=(32, 2045), decode_tokens=8
    )

    async def go():
        async with FakeServer(
            ttft_s=0.001, prefill_s_per_token=2e-5, token_delay_s=0.004, decode_s_per_seq=0.003, max_model_len=2048
        ) as srv:
            return srv, await profile_async(srv.url, tmp_path, options=DriveOptions(gpu="RTX 4090"), profile=prof)

    srv, res = asyncio.run(go())
    assert all(s.lcp == 0 for s in srv.seen[1:])  # distinct prompts: no prefix-cache hit
    comp = res.tables["component"]
    pre = comp[comp["op"] == "prefill_iteration"]
    assert pre["num_tokens"].tolist() == [16, 512, 2000]  # 4096 > max_model_len: skipped
    assert pre["seconds"].is_monotonic_increasing
    assert (pre["scope"] == "model").all() and (pre["phase"] == "prefill").all() and (pre["batch_size"] == 1).all()
    dec = comp[comp["op"] == "decode_iteration"]
    assert dec["batch_size"].tolist() == [1, 4] and dec["context_tokens"].tolist() == [36, 36]
    one, four = dec["seconds"].tolist()
    assert 0.005 < one < 0.012 and 0.013 < four < 0.03 and four > one  # 4 ms + 3 ms per running sequence
    assert any("2045" in s for s in res.skipped)
    assert pq.read_schema(tmp_path / "component.parquet").remove_metadata() == TABLES["component"]
    cell = pd.read_parquet(tmp_path / "cells.parquet").iloc[0]
    assert cell["cell_id"] == "live-profile/rtx4090/fake-model-1b" and cell["kind"] == "component"
    assert json.loads(cell["config_json"])["engine"]["num_gpu_blocks"] == 4096


def test_decode_step_uses_the_common_window_only() -> None:
    a = StreamResult(0, 0, 1.0, 2.0, 0, chunks=[(1.0, 1), (1.5, 1), (1.6, 1), (1.7, 1), (1.8, 1), (2.0, 1)])
    b = StreamResult(0, 0, 1.5, 3.0, 0, chunks=[(1.5, 1), (1.6, 1), (1.7, 1), (1.8, 1), (1.9, 1), (3.0, 1)])
    # window [1.5, 2.0]: a spans 0.5 s over 4 tokens, b 0.4 s over 4 tokens; bunched chunks do not matter
    step, clock = decode_step_s([a, b])
    assert clock == "window" and abs(step - (0.125 + 0.1) / 2) < 1e-9


def test_decode_step_prefers_the_engines_clock() -> None:
    """vLLM's per-request decode interval (engine clock) wins over the driver's chunk times, which a bunched
    delivery makes meaningless; a stream without it sends every stream back to the driver's clock."""
    bunched = [(2.0, 1), (2.00001, 1), (2.00002, 1), (2.00003, 1), (2.00004, 1)]  # 5 tokens in 40 us
    a = StreamResult(0, 0, 2.0, 2.00004, 0, completion_tokens=5, chunks=bunched, engine_decode_s=0.010)
    b = StreamResult(0, 0, 2.0, 2.00004, 0, completion_tokens=5, chunks=bunched, engine_decode_s=0.014)
    step, clock = decode_step_s([a, b])
    assert clock == "engine" and abs(step - (0.010 / 4 + 0.014 / 4) / 2) < 1e-12
    c = StreamResult(0, 0, 2.0, 2.00004, 0, completion_tokens=5, chunks=bunched)  # no per-request metrics
    step, clock = decode_step_s([a, c])
    assert clock == "window" and abs(step - 1e-5) < 1e-9  # the artefact the engine's clock avoids


def test_profile_reads_decode_steps_off_the_engines_clock_when_delivery_is_bunched(tmp_path) -> None:
    """A server that delivers each stream in one burst after its last step (vLLM's CPU build with a starved API
    server): with per-request metrics the profile still measures the step; without them it cannot (~0)."""
    prof = ProfileOptions(prefill_sizes=(16, 64, 256), repeats=1, batch_sizes=(1, 4), contexts=(32,), decode_tokens=8)

    async def go(metrics: bool, out):
        async with FakeServer(
            ttft_s=0.001, token_delay_s=0.004, decode_s_per_seq=0.003, bunched=True, per_request_metrics=metrics
        ) as srv:
            return await profile_async(srv.url, out, options=DriveOptions(gpu="RTX 4090"), profile=prof)

    res = asyncio.run(go(True, tmp_path / "engine"))
    dec = res.tables["component"].query("op == 'decode_iteration'")
    one, four = dec["seconds"].tolist()
    assert 0.005 < one < 0.012 and 0.013 < four < 0.03  # 4 ms + 3 ms per running sequence, as unbunched
    cfg = json.loads(pd.read_parquet(tmp_path / "engine" / "cells.parquet")["config_json"].iloc[0])
    assert cfg["decode_clock"] == {"engine": 2}
    res = asyncio.run(go(False, tmp_path / "driver"))
    dec = res.tables["component"].query("op == 'decode_iteration'")
    assert (dec["seconds"] < 0.002).all()  # the driver's clock sees the burst, not the steps
    cfg = json.loads(pd.read_parquet(tmp_path / "driver" / "cells.parquet")["config_json"].iloc[0])
    assert "engine" not in cfg["decode_clock"] and sum(cfg["decode_clock"].values()) == 2


def test_drive_cli_end_to_end(tmp_path) -> None:
    trace_dir, out = tmp_path / "trace", tmp_path / "out"
    write_trace(trace_dir, make_trace([[(30, 3, 0.01), (50, 2, None)]] * 3, shared_prefix_tokens=8))
    with ThreadedFakeServer() as srv:
        r = runner.invoke(
            app,
            [
                "drive",
                "--endpoint",
                srv.url,
                "--trace",
                str(trace_dir),
                "--out",
                str(out),
                "--concurrency",
                "2",
                "--tools",
                "fixed",
                "--tool-fixed",
                "0.005",
                "--quiet",
                "--token-scale",
                "2",
                "--metrics-interval",
                "0",
            ],
        )
        assert r.exit_code == 0, r.output
        assert "live run" in r.output and "prefix hit rate" in r.output
        assert [len(s.tokens) for s in srv.turns] == [60, 60, 100, 100, 60, 100] or sorted(
            len(s.tokens) for s in srv.turns
        ) == [60, 60, 60, 100, 100, 100]
        r = runner.invoke(
            app,
            [
                "drive-profile",
                "--endpoint",
                srv.url,
                "--out",
                str(tmp_path / "prof"),
                "--prefill-sizes",
                "16,64",
                "--batch-sizes",
                "1,2",
                "--contexts",
                "16",
                "--decode-tokens",
                "4",
                "--repeats",
                "1",
            ],
        )
        assert r.exit_code == 0, r.output
        assert "decode_iteration" in r.output
        assert "warning:" in r.output and "driver's clock" in r.output  # this server sends no per-request metrics
    cells = pd.read_parquet(out / "cells.parquet")
    assert json.loads(cells["config_json"].iloc[0])["driver"]["workload_label"] == "trace"
    assert len(pd.read_parquet(out / "requests.parquet")) == 6


def test_drive_cli_reports_an_unreachable_endpoint(tmp_path) -> None:
    trace_dir = tmp_path / "trace"
    write_trace(trace_dir, make_trace([[(30, 3, None)]]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = runner.invoke(
        app,
        [
            "drive",
            "--endpoint",
            f"http://127.0.0.1:{port}/v1",
            "--trace",
            str(trace_dir),
            "--out",
            str(tmp_path / "out"),
            "--tools",
            "fixed",
        ],
    )
    assert r.exit_code == 1
    assert f"cannot reach http://127.0.0.1:{port}/v1/models" in r.output


def test_profile_fit_drops_streaming_artefacts_and_recovers_the_steps() -> None:
    """Decode steps measured at ~20 us beside ~6 ms ones (a burst of chunks) leave the fit; the true line is found."""
    import numpy as np
    import pandas as pd

    from collectors.live.engine_profile_pricer import ProfilePricer

    rows = []
    for b in (1, 2, 4, 8):
        for ctx in (80, 140, 270):
            sec = 5e-3 + 1e-4 * b + 2e-7 * b * ctx
            rows.append(
                {"op": "decode_iteration", "batch_size": b, "context_tokens": ctx, "num_tokens": b, "seconds": sec}
            )
            rows.append(
                {"op": "decode_iteration", "batch_size": b, "context_tokens": ctx, "num_tokens": b, "seconds": 2e-5}
            )  # the artefact: chunks delivered back to back
    for t in (16, 64, 256):
        rows.append(
            {
                "op": "prefill_iteration",
                "batch_size": 1,
                "context_tokens": 0,
                "num_tokens": t,
                "seconds": 0.015 + 1.7e-5 * t,
            }
        )
    p = ProfilePricer.from_component(pd.DataFrame(rows))
    assert p.fit_report["decode_rows_dropped_as_artefacts"] == 12
    assert p.fit_report["decode_median_abs_rel_err"] < 1e-6
    assert np.allclose([p.coeffs.a0, p.coeffs.a1, p.coeffs.c], [5e-3, 1e-4, 2e-7], rtol=1e-4)


def test_drive_profile_says_which_clock_timed_the_decode_steps(tmp_path) -> None:
    args = ["--prefill-sizes", "16,64", "--batch-sizes", "1,2", "--contexts", "16", "--decode-tokens", "4"]
    with ThreadedFakeServer(per_request_metrics=True) as srv:
        r = runner.invoke(app, ["drive-profile", "--endpoint", srv.url, "--out", str(tmp_path / "p"), *args])
    assert r.exit_code == 0, r.output
    assert "decode steps timed on: the engine's clock x2" in r.output and "warning:" not in r.output
