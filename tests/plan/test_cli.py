"""``plan`` on the console and on disk: failures explained with the option that fixes
them, invalid arguments refused before any folder exists, Ctrl-C ending quietly with the previous output whole
and the finished cells kept for a rerun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agentreplay.cli.plan  # noqa: F401  (registers `plan` on the app)
from agentreplay.cli.app import app

runner = CliRunner()


def _args(bundled: Path, out: Path, *extra: str) -> list[str]:
    return [
        "plan",
        "--trace",
        str(bundled),
        "--load",
        "0.05",
        "--slo",
        "jct_p90<=900",
        "--max-programs",
        "4",
        "--max-instances",
        "1",
        "--workers",
        "1",
        "--out",
        str(out),
        *extra,
    ]


def test_failures_are_explained_with_the_tp_that_fixes_them(bundled: Path, tmp_path: Path) -> None:
    """70B on one or two H100s never runs (weights, then KV): each reason once, with --tp / --max-model-len."""
    out = tmp_path / "o"
    r = runner.invoke(
        app,
        _args(bundled, out, "--models", "llama-3.1-70b", "--tp", "1,2", "--presets", "vllm,lmcache-offload"),
        terminal_width=250,
    )
    assert r.exit_code == 1, r.output  # nothing meets the objective
    text = r.output
    assert "why configurations fail:" in text
    assert "weights do not fit in GPU memory (1):" in text and "KV cache cannot hold the longest request (1):" in text
    assert "h100-sxm llama-3.1-70b tp1 (lmcache-offload, vllm): llama-3.1-70b (bf16, tp=1) on h100-sxm: weights" in text
    assert "feasible with --tp 4" in text and "--max-model-len" in text
    assert "None programs" not in text and "(first 4 programs, 3 seeds each" in text
    assert "no band" not in text and " cells) " in text  # every row names its band's cells (or the nearest)
    data = json.loads((out / "plan.json").read_text())
    assert set(data["failures"]) == {"weights", "kv"}
    cost = {r["preset"]: r["cost"] for r in data["configurations"] if r["tp"] == 1}
    assert cost["vllm"] == "5.56 GPU-h" and cost["lmcache-offload"] == "5.56 GPU-h + 1,422 GiB-h DRAM"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gpus", "h100-nope"], "--gpus 'h100-nope'"),
        (["--models", "gpt-9"], "--models 'gpt-9'"),
        (["--presets", "vllm,fastest"], "--presets 'fastest'"),
        (["--tp", "0"], "--tp '0'"),
        (["--seeds", "a"], "--seeds 'a'"),
        (["--max-model-len", "1"], "--max-model-len 1"),
        (["--load", "-1"], "--load -1"),
        (["--prices", "nope.toml"], "--prices:"),
    ],
)
def test_invalid_arguments_leave_no_folder(bundled: Path, tmp_path: Path, extra: list[str], message: str) -> None:
    out = tmp_path / "deeper" / "o"
    r = runner.invoke(app, _args(bundled, out, *extra))
    assert r.exit_code == 1 and message in r.output, r.output
    assert not (tmp_path / "deeper").exists()


def test_a_price_missing_for_what_a_configuration_uses_is_refused_before_running(bundled: Path, tmp_path: Path) -> None:
    prices = tmp_path / "p.toml"
    prices.write_text("[prices]\ngpu_per_hour = { h100-sxm = 2.5 }\n")
    out = tmp_path / "o"
    r = runner.invoke(app, _args(bundled, out, "--prices", str(prices), "--presets", "vllm,lmcache-offload"))
    assert r.exit_code == 1 and "no dram_per_gib_hour" in r.output and not out.exists()
    prices.write_text("[prices]\ngpu_per_hour = { h100-sxm = 2.5 }\ndram_per_gib_hour = 0.01\n")
    r = runner.invoke(
        app, _args(bundled, out, "--prices", str(prices), "--presets", "vllm,lmcache-offload", "--seeds", "0")
    )
    assert r.exit_code in (0, 1), r.output
    rows = json.loads((out / "plan.json").read_text())["configurations"]
    hours = 1000 / (0.05 * 3600)
    usd = {r["preset"]: r["usd_per_1000_tasks"] for r in rows}
    assert usd["vllm"] == pytest.approx(2.5 * hours) and usd["lmcache-offload"] == pytest.approx((2.5 + 2.56) * hours)


def _interrupt_after_first_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C right after the first round's cells are stored (as a terminal's SIGINT would land mid-plan)."""
    import agentreplay.plan.search as search

    real = search.run_sweep

    def run_then_interrupt(*args, **kw):  # type: ignore[no-untyped-def]
        real(*args, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(search, "run_sweep", run_then_interrupt)


def test_ctrl_c_keeps_the_previous_plan_whole_and_the_finished_cells(
    bundled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "o"
    first = runner.invoke(app, _args(bundled, out, "--seeds", "0", "--slo", "jct_p90<=100000"))
    assert first.exit_code == 0, first.output
    before = (out / "plan.json").read_text()
    cells = len(list(out.glob("sweep/results/*/*.parquet")))
    _interrupt_after_first_round(monkeypatch)
    more = _args(bundled, out, "--seeds", "0", "--slo", "jct_p90<=100000", "--presets", "vllm,sglang")
    r = runner.invoke(app, more)
    assert r.exit_code == 130
    assert [x for x in r.output.splitlines() if "interrupted" in x] == [
        f"interrupted: {out}: the previous plan left as it was; 1 finished cell(s) added to {out}/sweep; rerun the "
        "same command to resume from them"
    ]
    assert "Traceback" not in r.output
    assert (out / "plan.json").read_text() == before
    assert len(list(out.glob("sweep/results/*/*.parquet"))) == cells + 1
    assert [p.name for p in tmp_path.iterdir()] == ["o"]
    monkeypatch.undo()
    again = runner.invoke(app, [*more, "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads((out / "plan.json").read_text())["configurations_simulated_now"] == 0  # all resumed


def test_ctrl_c_on_a_first_run_keeps_only_the_resume_data(
    bundled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "o"
    _interrupt_after_first_round(monkeypatch)
    r = runner.invoke(app, _args(bundled, out, "--seeds", "0,1"))
    assert r.exit_code == 130 and "2 finished cell(s) kept in" in r.output and "no plan written yet" in r.output
    assert sorted(p.name for p in out.iterdir()) == [".agentreplay-output", "sweep"]
    assert len(list(out.glob("sweep/results/*/*.parquet"))) == 2


def test_ctrl_c_ends_the_local_pool_at_once() -> None:
    """Leaving the executor's block on KeyboardInterrupt terminates the running workers (they ignore SIGINT
    themselves, so none prints a traceback) instead of waiting for their cells."""
    import time

    from agentreplay.sweep import LocalExecutor

    ex = LocalExecutor(1)
    procs = []
    with pytest.raises(KeyboardInterrupt), ex:
        fut = ex.submit(time.sleep, 600)
        while not fut.running():
            time.sleep(0.05)
        procs = list(ex._pool._processes.values())
        raise KeyboardInterrupt
    # the pool's own manager thread may reap a worker concurrently, and is_alive() reads a reaped-but-not-yet-
    # recorded worker as alive for an instant; a worker of the 600 s cell left running stays alive for minutes
    deadline = time.monotonic() + 30
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs and not any(p.is_alive() for p in procs)
