"""``simulate`` prints each headline figure's error band from an error-band file."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

runner = CliRunner()


def _bands(path, rows):
    path.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "residuals": [
                    {"cell_id": c, "gpu_class": g, "model_class": m, "family": f, "error_pct": e}
                    for c, g, m, f, e in rows
                ],
            }
        )
    )
    return path


def test_simulate_prints_and_records_the_bands(tmp_path) -> None:
    write_trace(tmp_path / "tr", make_trace([[(500, 20, 0.1), (700, 20, None)]] * 2))
    bands = _bands(
        tmp_path / "b.json",
        [
            ("x", "datacenter", "dense-small", "ttft", 12.0),
            ("y", "datacenter", "dense-small", "ttft", -4.0),
            ("y", "workstation", "dense-small", "e2e", 30.0),
        ],
    )
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tmp_path / "tr"),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--gpu",
            "h100-sxm",
            "--model",
            "llama-3.1-8b",
            "--error-bands",
            str(bands),
        ],
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "(+-8%, 2 comparable cells)" in text  # TTFT: both datacenter 8B cells
    # JCT: only a workstation e2e cell, not comparable: named as the nearest, with the sign and size of its error
    assert "(no comparable cell; nearest simulator high by 30% on average (|error| 30%))" in text
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    ttft = s["error_bands"]["ttft_s"]
    assert {k: ttft[k] for k in ("mape_pct", "mean_signed_pct", "n_cells", "level", "text", "comparable")} == {
        "mape_pct": 8.0,
        "mean_signed_pct": 4.0,
        "n_cells": 2,
        "level": "GPU and model class",
        "text": "+-8%, 2 comparable cells",
        "comparable": True,
    }
    assert ttft["cells"] and ttft["cells"] in text  # the cells are named on the console too
    assert s["error_bands"]["jct_s"]["comparable"] is False
    assert "throughput" not in s["error_bands"]  # no residual of that family: no band, never a made-up one


def test_no_bands_when_asked_and_a_bad_file_is_an_error(tmp_path) -> None:
    write_trace(tmp_path / "tr", make_trace([[(500, 20, None)]]))
    res = runner.invoke(
        app,
        ["simulate", "--trace", str(tmp_path / "tr"), "--out", str(tmp_path / "o"), "--quiet", "--error-bands", "none"],
    )
    assert res.exit_code == 0 and "comparable" not in res.output
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["error_bands"] == {}
    (tmp_path / "bad.json").write_text("{}")
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tmp_path / "tr"),
            "--out",
            str(tmp_path / "o2"),
            "--quiet",
            "--error-bands",
            str(tmp_path / "bad.json"),
        ],
    )
    assert res.exit_code != 0 and "bad.json" in res.output and "not an error-band file" in res.output


def test_request_level_run_shows_the_jct_band_on_e2e_latency(tmp_path) -> None:
    """A request-level trace (one-turn programs) is summarised per request: its E2E latency is the programs' JCT,
    so it carries the JCT band."""
    write_trace(tmp_path / "tr", make_trace([[(500, 20, None)]] * 2))
    bands = _bands(tmp_path / "b.json", [("y", "datacenter", "dense-small", "e2e", 30.0)])
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(tmp_path / "tr"),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--gpu",
            "h100-sxm",
            "--model",
            "llama-3.1-8b",
            "--error-bands",
            str(bands),
        ],
        terminal_width=200,
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "E2E latency" in text and "requests/s" in text and "JCT" not in text
    assert "(+-30%, 1 comparable cell)" in text
