"""Every command's --help renders, and every option says what it is and what it defaults to."""

from __future__ import annotations

import importlib
from typing import Any, get_args

import pytest
import typer.main
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.policy.presets import PRESETS
from agentreplay.sim import config as C

runner = CliRunner()


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, command) for the click command typer builds and every subcommand (typer vendors its own click, so
    groups are recognised by their ``commands``)."""
    out = [(path, cmd)]
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            out += _walk(sub, (*path, name))
    return out


COMMANDS = _walk(typer.main.get_command(app))


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {
        "collect",
        "simulate",
        "compare",
        "catalog",
        "report",
        "report sweep",
        "fit-tools",
        "drive-profile",
        "validate",
        "sweep",
        "synth",
        "query",
        "describe",
    } <= names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "agentreplay")
def test_help_renders(path: tuple[str, ...]) -> None:
    res = runner.invoke(app, [*path, "--help"])
    assert res.exit_code == 0, f"{' '.join(path)} --help: {res.output}\n{res.exception!r}"
    assert "Usage" in res.output and len(res.output.strip()) > 100


def _options() -> list[tuple[str, Any]]:
    return [
        (" ".join(p), o) for p, c in COMMANDS for o in c.params if o.param_type_name == "option" and o.name != "help"
    ]


#: Options whose help does not state a default yet (none).
NO_DEFAULT_YET: set[str] = set()


def test_every_option_has_help_and_states_its_default() -> None:
    missing, no_default = [], []
    for cmd, opt in _options():
        text = (opt.help or "").strip()
        if not text:
            missing.append(f"{cmd} {opt.opts[0]}")
            continue
        shown = opt.default is not None and opt.show_default is not False
        if not (
            opt.is_flag
            or opt.required
            or shown
            or "default" in text.lower()
            or f"{cmd} {opt.opts[0]}" in NO_DEFAULT_YET
        ):
            no_default.append(f"{cmd} {opt.opts[0]}")
    assert not missing, f"options without help: {missing}"
    assert not no_default, f"options whose help does not state the default: {no_default}"


def test_choices_in_help_come_from_the_config_literals() -> None:
    """(The policy options' choices come from the policy registries: tests/test_registries.py.)"""
    sim = dict(_options_of("simulate"))
    for opt, lit in (("--arrival", C.Arrival), ("--tools", C.ToolMode), ("--perf", C.PerfName), ("--dtype", C.Dtype)):
        assert " | ".join(get_args(lit)) in sim[opt].help, opt
    assert all(p in sim["--preset"].help for p in PRESETS)
    assert f"Default: {C.RouterConfig().policy}." in sim["--router"].help


def _options_of(command: str) -> list[tuple[str, Any]]:
    return [(o.opts[0], o) for c, o in _options() if c == command]


def test_compare_shares_simulate_options() -> None:
    sim, cmp = dict(_options_of("simulate")), dict(_options_of("compare"))
    for name in ("--gpu", "--model", "--instances", "--concurrency", "--num-gpu-blocks", "--dram-gib", "--seed"):
        assert cmp[name].help == sim[name].help


def test_drive_profile_help_states_the_profile_defaults() -> None:
    from collectors.live.profile import ProfileOptions

    opts, d = dict(_options_of("drive-profile")), ProfileOptions()
    for name, value in (
        ("--prefill-sizes", d.prefill_sizes),
        ("--batch-sizes", d.batch_sizes),
        ("--contexts", d.contexts),
        ("--decode-tokens", (d.decode_tokens,)),
        ("--repeats", (d.repeats,)),
    ):
        assert f"Default: {','.join(map(str, value))}." in opts[name].help, name


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS if p], ids=" ".join)
def test_every_command_shows_an_example(path: tuple[str, ...]) -> None:
    res = runner.invoke(app, [*path, "--help"])
    assert res.exit_code == 0 and "Example: agentreplay" in res.output


def test_main_keeps_only_the_command_it_runs(monkeypatch) -> None:
    app_module = importlib.import_module("agentreplay.cli.app")
    calls = []
    monkeypatch.setattr("sys.argv", ["agentreplay", "catalog", "--json"])
    monkeypatch.setattr(
        typer.Typer, "__call__", lambda self: calls.append(sorted(typer.main.get_command(self).commands))
    )
    app_module.main()
    assert calls == [["catalog"]]
    calls.clear()
    monkeypatch.setattr("sys.argv", ["agentreplay", "report", "sweep", "--help"])
    app_module.main()
    assert calls == [["report"]]


def test_collect_formats_in_help_are_the_collector_registry() -> None:
    """collect lists its formats without importing the collectors; the list is the registry's, in order."""
    from collectors import FORMATS
    from collectors.registry import formats

    assert tuple(formats()) == FORMATS
    res = runner.invoke(app, ["collect", "--help"], terminal_width=200)
    assert all(f in res.output for f in (*FORMATS, "auto"))


def test_max_model_len_is_shared_by_simulate_and_compare() -> None:
    sim, cmp = dict(_options_of("simulate")), dict(_options_of("compare"))
    assert cmp["--max-model-len"].help == sim["--max-model-len"].help
    assert "tokens" in sim["--max-model-len"].help and "Default: none" in sim["--max-model-len"].help


def test_every_commands_short_help_is_one_line_in_the_listing() -> None:
    """The top-level listing shows each command's first docstring paragraph with its line breaks kept, which puts
    a description word at the start of a line, where a reader (or a tool) takes it for a command."""
    import typer.main

    from agentreplay.cli import app

    group = typer.main.get_command(app)
    long = {}
    assert len(group.commands) > 10
    for name, cmd in group.commands.items():
        first = (cmd.help or "").strip().split("\n\n")[0]
        if "\n" in first:
            long[name] = first
    assert not long, long


def _help_at(width: int, *path: str) -> str:
    res = runner.invoke(app, [*path, "--help"], terminal_width=width, env={"COLUMNS": str(width)})
    assert res.exit_code == 0, res.output
    assert max(map(len, res.output.splitlines())) <= width
    return res.output


def test_simulate_help_at_80_columns_shows_every_option_name_whole_in_panels() -> None:
    """at 80 columns one table of 40 options cut 9 names; the options now come in panels, each a
    table narrow enough for its names (agentreplay.cli.options: the panels)."""
    import re

    from agentreplay.cli import options as o

    text = _help_at(80, "simulate")
    rows = [[n for n in (*opt.opts, *opt.secondary_opts) if n.startswith("--")] for _, opt in _options_of("simulate")]
    assert len(rows) > 40
    # an option's row of its panel's table: its long name (after the required mark), then its negative flag
    cut = [r for r in rows if not re.search(r"^│ [ *]*" + r"\s+(-\w\s+)?".join(map(re.escape, r)) + r"\s", text, re.M)]
    assert not cut, f"option names cut or missing at 80 columns: {cut}"
    for panel in (o.WORKLOAD, o.DEPLOYMENT, o.PRICING, o.POLICIES, o.MECHANISMS, o.OUTPUT):
        assert f"─ {panel} ─" in text


def test_simulate_help_lists_every_config_section_and_where_it_is_documented() -> None:
    from dataclasses import fields

    from agentreplay.cli.options import config_section_rows
    from agentreplay.features import features

    sections = [f.name for f in fields(C.SimConfig) if f.name != "seed"]
    assert sorted(config_section_rows()) == sorted(sections)
    text = _help_at(80, "simulate")
    lines = {line.split()[0] for line in text.splitlines() if line.strip().startswith("[")}
    assert lines == {f"[{s}]" for s in sections}
    assert "agentreplay/sim/config.py" in text and "configuration reference" in text
    for f in features():
        if f.sections:
            assert f"agentreplay/features/{f.name}/" in text, f.name


def test_collect_help_lists_the_files_each_format_reads() -> None:
    from collectors import FILES

    text = " ".join(_help_at(200, "collect").split())
    assert all(f"{name} {files}" in text for name, files in FILES.items())


def test_the_files_listed_name_each_request_format_s_fields() -> None:
    """The file list sits in ``collectors`` (the CLI reads it without importing a collector); the fields it names
    are the ones each request-trace collector recognises a file by."""
    from collectors import FILES
    from collectors.registry import formats

    for name, collector in formats().items():
        module = importlib.import_module(type(collector).__module__)
        fields = getattr(module, "FIELDS", None) or getattr(module, "COLUMNS", ())
        assert all(f in FILES[name] for f in fields), name
