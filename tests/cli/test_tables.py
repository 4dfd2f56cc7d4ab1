"""Tables never cut a name or a number, piped or on a narrow terminal; table commands have --json."""

from __future__ import annotations

import importlib
import io
import json

from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.perf import list_gpus, list_models

runner = CliRunner()


def test_piped_catalog_on_a_narrow_terminal_keeps_every_name() -> None:
    res = runner.invoke(app, ["catalog"], env={"COLUMNS": "40"}, terminal_width=40)
    assert res.exit_code == 0, res.output
    assert "…" not in res.output
    for name in ("llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", *list_gpus(), *list_models()):
        assert name in res.output, name
    assert "nvlink 56.25" in res.output  # a two-word cell stays on one line when piped


def test_catalog_json_lists_every_gpu_and_model() -> None:
    res = runner.invoke(app, ["catalog", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [g["name"] for g in data["gpus"]] == list_gpus()
    assert [m["name"] for m in data["models"]] == list_models()
    h100 = next(g for g in data["gpus"] if g["name"] == "h100-sxm")
    assert h100["memory_gib"] == 80 and h100["fp8_tflops"] > h100["bf16_tflops"]


def test_show_on_a_narrow_terminal_wraps_or_widens_but_never_cuts(monkeypatch) -> None:
    mod = importlib.import_module("agentreplay.cli.output")
    buf = io.StringIO()
    narrow = Console(file=buf, width=30, force_terminal=True, color_system=None)
    monkeypatch.setattr(mod, "console", narrow)
    t = Table(title="t")
    for col in ("name", "value", "comment"):
        t.add_column(col)
    t.add_row("qwen3-30b-a3b-instruct-2507", "1,629,000.5", "a long comment that can wrap at its spaces")
    mod.show(t)
    text = buf.getvalue()
    assert "…" not in text
    assert "qwen3-30b-a3b-instruct-2507" in text and "1,629,000.5" in text
    assert narrow.width == 30  # the console is left as it was


def test_every_table_command_has_json() -> None:
    import typer.main

    group = typer.main.get_command(app)
    tables = (
        "collect",
        "describe",
        "query",
        "simulate",
        "catalog",
        "compare",
        "sweep",
        "fit-tools",
        "drive",
        "drive-profile",
    )
    for name in tables:
        opts = {o for p in group.commands[name].params for o in getattr(p, "opts", [])}
        assert "--json" in opts, name
