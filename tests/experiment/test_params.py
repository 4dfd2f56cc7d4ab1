"""Params fields as options: the types an option can take, text parsed and written back, errors that name the
option and the value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import pytest

from agentreplay.experiment import param
from agentreplay.experiment.params import ParamError, build, command_line, parse, show, specs


@dataclass(frozen=True, slots=True)
class P:
    count: int = param(2, "A count.")
    rate: float | None = param(None, "A rate.", none="the trace's")
    kind: Literal["fail", "drain"] = param("fail", "A kind.")
    loads: tuple[int, ...] = param((4, 64), "Loads.")
    budgets: tuple[int | None, ...] = param((None, 0), "Budgets.")
    shares: Mapping[str, float] | None = param(None, "Shares.", none="none")
    on: bool = param(False, "A switch.")


def test_each_field_is_an_option_of_its_shape() -> None:
    by = {s.name: s for s in specs(P)}
    assert [s.flag for s in by.values()] == [
        "--count",
        "--rate",
        "--kind",
        "--loads",
        "--budgets",
        "--shares",
        "--on",
    ]
    assert [by[n].shape for n in by] == ["scalar", "scalar", "scalar", "tuple", "tuple", "map", "flag"]
    assert by["kind"].choices == ("fail", "drain") and "One of: fail, drain." in by["kind"].help()
    assert by["rate"].help() == "A rate. Default: the trace's." and by["loads"].help() == "Loads. Default: 4,64."
    assert by["budgets"].help() == "Budgets. Default: none,0." and by["on"].help() == "A switch. Default: off."


def test_text_is_parsed_and_written_back() -> None:
    by = {s.name: s for s in specs(P)}
    assert parse(by["loads"], ["4,8", "16"]) == (4, 8, 16)  # repeated and comma-separated
    assert parse(by["budgets"], "none, 128,0") == (None, 128, 0)
    assert parse(by["shares"], "interactive=0.2,batch=0.8") == {"interactive": 0.2, "batch": 0.8}
    assert parse(by["rate"], "none") is None and parse(by["rate"], "0.5") == 0.5
    for name, value in (("loads", (4, 8)), ("budgets", (None, 3)), ("shares", {"a": 1.5}), ("kind", "drain")):
        assert parse(by[name], show(by[name], value)) == value


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("count", "x", "--count 'x': an integer"),
        ("loads", "4,x", "--loads item 'x': an integer"),
        ("budgets", "none,q", "--budgets item 'q': an integer or 'none'"),
        ("kind", "explode", "--kind 'explode': one of fail, drain"),
        ("shares", "urgent", "--shares 'urgent': expected NAME=NUMBER pairs"),
        ("loads", ",", "--loads ',': give at least one value"),
    ],
)
def test_bad_text_names_the_option_and_the_value(name: str, text: str, message: str) -> None:
    spec = next(s for s in specs(P) if s.name == name)
    with pytest.raises(ParamError) as err:
        parse(spec, [text] if spec.shape != "scalar" else text)
    assert message in str(err.value)


def test_build_keeps_defaults_and_the_command_line_lists_the_rest() -> None:
    p = build(P, {"loads": ["8"], "on": True, "rate": None})
    assert (p.count, p.loads, p.rate, p.on) == (2, (8,), None, True)
    assert command_line(p, "x") == "agentreplay fleet x --loads 8 --on"


def test_a_field_without_a_doc_or_of_another_type_is_refused() -> None:
    @dataclass(frozen=True)
    class NoDoc:
        n: int = 1

    @dataclass(frozen=True)
    class Listy:
        xs: set[int] = param(frozenset(), "A set.")  # noqa: RUF009  (an unsupported type, on purpose)

    with pytest.raises(TypeError, match=r"NoDoc\.n: no doc"):
        specs(NoDoc)
    with pytest.raises(TypeError, match=r"Listy\.xs: type"):
        specs(Listy)
