"""Option values converted without pydantic (agentreplay.cli.coerce) are typer's: every parameter of every command,
given plain values, unusual values and bad ones, converts to the same value or fails with the same message."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
import typer.main
from typer._coercion import build_runtime_param
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.cli.coerce import PlainCommand, PlainGroup, PlainValue, leaf, plain


def _walk(cmd: Any) -> list[Any]:
    out = [cmd]
    for sub in getattr(cmd, "commands", {}).values():
        out += _walk(sub)
    return out


COMMANDS = _walk(typer.main.get_command(app))


def _samples(tmp: Path) -> dict[Any, list[Any]]:
    f, d = tmp / "file.txt", tmp / "dir"
    f.write_text("x")
    d.mkdir(exist_ok=True)
    return {
        str: ["x", "", "a b", "--", "ü"],
        int: ["3", "-2", "+5", "007", "1_000", " 4", "3.0", "1e3", "x", "", 5, 0],
        float: ["1.5", "-0.5", ".5", "5.", "1e3", "1E-2", "+2", "inf", "nan", "1_0.5", "x", "", 2, 2.5],
        Path: [str(f), str(d), str(tmp / "missing"), "", "-", Path("."), f],
    }


def _convert(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        out = runtime.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # typer's BadParameter and the like: compared by type and message
        return "error", (type(exc).__name__, str(exc))
    return "value", (type(out).__name__, repr(out))  # (repr: nan == nan)


def test_every_command_and_group_converts_plain_values_itself() -> None:
    assert all(isinstance(c, PlainCommand | PlainGroup) for c in COMMANDS)
    ctx = COMMANDS[0].context_class(COMMANDS[0], info_name="agentreplay")
    assert all(isinstance(p.get_runtime_param(), PlainValue) for c in COMMANDS for p in c.get_params(ctx))


def test_plain_values_convert_as_typer_converts_them(tmp_path) -> None:
    samples = _samples(tmp_path)
    checked = set()
    for cmd in COMMANDS:
        ctx = cmd.context_class(cmd, info_name=cmd.name or "agentreplay")
        for p in plain(list(cmd.params)):
            d = p.type_descriptor
            ours, theirs = p.get_runtime_param(), build_runtime_param(d)
            convert, many = leaf(d)
            base = d.annotation.__args__[0] if many else d.annotation
            values: list[Any] = [None]
            if base in samples:
                values += [tuple(samples[base][:3]), ()] if many else samples[base]
            for v in values:
                assert _convert(ours, v, p, ctx) == _convert(theirs, v, p, ctx), (cmd.name, p.name, v)
            checked.add((repr(d.annotation), convert is not None))
    # every kind of option the commands have was tried, plain and constrained
    assert {("<class 'int'>", True), ("<class 'int'>", False), ("<class 'pathlib.Path'>", True)} <= checked
    assert {("list[str]", True), ("list[pathlib.Path]", True), ("<class 'float'>", True)} <= checked


@pytest.mark.parametrize("value", ["1e3", "x", " 4"])
def test_a_value_the_patterns_refuse_goes_to_typer(value: str) -> None:
    """A value INT refuses is converted (or refused, with its message) by typer's own conversion."""
    cmd = next(c for c in COMMANDS if c.name == "synth")
    p = next(p for p in plain(list(cmd.params)) if p.name == "seed")
    ctx = cmd.context_class(cmd, info_name="synth")
    assert _convert(p.get_runtime_param(), value, p, ctx) == _convert(
        build_runtime_param(p.type_descriptor), value, p, ctx
    )
    assert "typer_value" in vars(p.get_runtime_param())  # typer's conversion was built for it


def test_a_path_gets_typers_checks(tmp_path) -> None:
    """A plain path still goes through typer's checks of what the option asks of it (here: that it exists)."""
    t = typer.Typer(cls=PlainGroup)

    @t.command(cls=PlainCommand)
    def show(path: Annotated[Path, typer.Option(exists=True, dir_okay=False)]) -> None:
        print(f"got {path!r}")

    @t.callback()
    def _root() -> None:
        """(a group, so the command is named)"""

    def run(path: Path) -> tuple[int, str]:
        res = CliRunner().invoke(t, ["show", "--path", str(path)], env={"COLUMNS": "300"})
        return res.exit_code, " ".join(res.output.split())

    code, text = run(tmp_path / "f")
    assert code == 2 and "does not exist" in text
    assert "is a directory" in run(tmp_path)[1]
    (tmp_path / "f").write_text("x")
    assert run(tmp_path / "f") == (0, f"got {tmp_path / 'f'!r}")
