"""``agentreplay fleet``: every registered experiment is a command listed with its summary, every Params field is
one of its options (with help stating the default), and the common options are there; bad input is named."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main
from rich.markup import escape

from agentreplay.cli import app
from agentreplay.experiment import experiments
from agentreplay.experiment.params import specs
from agentreplay.experiment.registry import COMMON, refs
from agentreplay.features.registry import features
from tests.experiment.helpers import fleet, runner, tiny_trace

GROUP = typer.main.get_command(app).commands["fleet"]  # type: ignore[attr-defined]


def test_every_registered_experiment_is_listed_with_its_summary() -> None:
    res = runner.invoke(app, ["fleet", "--help"], terminal_width=250, env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    listed = {line.split()[1] for line in res.output.splitlines() if line.startswith("│ ") and len(line.split()) > 2}
    assert set(experiments()) <= listed
    for exp in experiments().values():
        assert exp.summary in " ".join(res.output.split()), exp.name
    # each feature's declared experiments are registered, and nothing else but the preset comparison
    declared = [r for f in features() for r in f.experiments]
    assert list(refs()) == [*declared, "agentreplay.experiment.compare:EXPERIMENT"]


@pytest.mark.parametrize("name", list(experiments()))
def test_each_params_field_is_an_option_with_its_doc(name: str) -> None:
    exp = experiments()[name]
    options = {o.name: o for o in GROUP.commands[name].params}
    for spec in specs(exp.Params):
        assert spec.name in options, f"{name}: {spec.flag} is not an option"
        opt = options[spec.name]
        assert spec.flag in opt.opts and opt.help == escape(spec.help()), spec.flag  # its doc, choices, default
        assert spec.doc in spec.help() and "Default:" in opt.help
    assert {"trace", "gpu", "model", "tp", "config", "out", "workers", "dask", "seeds", "as_json"} <= set(options)
    assert not {s.name for s in specs(exp.Params)} & set(COMMON)


def test_bad_values_are_named_before_anything_runs(tmp_path: Path) -> None:
    trace = str(tiny_trace(tmp_path / "tr"))
    for args, message in (
        (["thinking", "--budgets", "none,x"], "--budgets item 'x'"),
        (["spec", "--loads", "0"], "--loads (0,): integers >= 1"),
        (["failover", "--kind", "explode"], "--kind 'explode': one of fail, drain"),
        (["thinking", "--seeds", "a"], "--seeds 'a'"),
        (["disagg", "--gpus", "3", "--tp", "2"], "--gpus 3 is not a multiple of the TP 2"),
    ):
        name, *rest = args
        res = fleet(name, "--trace", trace, "--out", str(tmp_path / name), *rest)
        assert res.exit_code == 1 and message in res.output, (args, res.output)
        assert not (tmp_path / name).exists()


def test_a_missing_trace_is_named(tmp_path: Path) -> None:
    res = fleet("footprint", "--trace", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and "nope" in res.output


def test_ctrl_c_says_where_the_finished_cells_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("agentreplay.sim.run.simulate", interrupted)
    out = tmp_path / "o"
    res = fleet("thinking", "--trace", str(tiny_trace(tmp_path / "tr")), "--loads", "1", "--out", str(out))
    assert res.exit_code == 130
    assert [x for x in res.output.splitlines() if "interrupted" in x] == [
        f"interrupted: the finished cells are kept in {out / 'sim-runs'}; rerun the same command to resume"
    ]
