"""``agentreplay fleet NAME``: one command per registered experiment (:mod:`agentreplay.experiment.registry`).

Each command's options are its experiment's ``Params`` fields (keyword options, help from the field docs,
:mod:`agentreplay.experiment.params`), then the options every experiment has: the trace, the base configuration
and the hardware it starts from, the output folder, the workers (or a Dask scheduler) and the seeds.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from agentreplay.cli import options as o
from agentreplay.cli.groups.fleet import fleet_app
from agentreplay.cli.output import fail
from agentreplay.experiment import Experiment, experiments
from agentreplay.experiment.params import Spec, build, specs

PANEL_STUDY, PANEL_RUN = "Study", "Run"


def _hardware_help(exp: Experiment, key: str, what: str) -> str:
    from agentreplay.sim.config import SimConfig

    given = exp.hardware.get(key)
    default = f"{given}" if given is not None else f"the config's, {getattr(SimConfig().hardware, key)} by default"
    return f"{what} Default: {default}."


def _seeds_help(exp: Experiment) -> str:
    seeds = exp.default_seeds(0)
    default = "the config's seed (0)" if seeds == [0] else f"{','.join(map(str, seeds))} (from the config's seed)"
    return (
        "Seeds, comma-separated: every variant runs once per seed, and the tables show the mean over the seeds "
        f"(per-program rows are kept per seed). Default: {default}."
    )


def _option(annotation: Any, *names: str, help: str, panel: str = PANEL_RUN, **kw: Any) -> Any:
    return Annotated[annotation, typer.Option(*names, help=escape(help), rich_help_panel=panel, **kw)]


def _kw(name: str, default: Any, annotation: Any, *flags: str, help: str) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=_option(annotation, *flags, help=help)
    )


def common(exp: Experiment) -> list[inspect.Parameter]:
    """The options every experiment has."""
    catalog = "(see `agentreplay catalog`)."
    return [
        _kw(
            "trace",
            o.BUNDLED_TRACE,
            Path,
            "--trace",
            "-t",
            help=f"Canonical trace folder (programs.parquet, turns.parquet). Default: the bundled sample, "
            f"{o.BUNDLED_TRACE}.",
        ),
        _kw(
            "config",
            None,
            Path | None,
            "--config",
            "-c",
            help="Base configuration TOML: what the study does not set. Default: the built-in defaults.",
        ),
        _kw("gpu", None, str | None, "--gpu", help=_hardware_help(exp, "gpu", f"GPU catalog name {catalog}")),
        _kw("model", None, str | None, "--model", help=_hardware_help(exp, "model", f"Model catalog name {catalog}")),
        _kw(
            "tp", None, int | None, "--tp", help=_hardware_help(exp, "tp", "Tensor-parallel degree, GPUs per instance.")
        ),
        _kw(
            "out",
            Path(f"out/fleet/{exp.name}"),
            Path,
            "--out",
            "-o",
            help="Output folder: the tables, Markdown and figures, and the finished cells in sim-runs/ (a rerun "
            "resumes; what a run with other options left is removed).",
        ),
        _kw(
            "workers",
            None,
            int | None,
            "--workers",
            help="Worker processes; 1 runs every cell in this process. Default: one per CPU.",
        ),
        _kw(
            "dask",
            None,
            str | None,
            "--dask",
            help="Run the cells on a Dask distributed cluster, e.g. tcp://10.0.0.5:8786 (workers need agentreplay "
            "installed and the trace and output paths readable). Default: a local process pool.",
        ),
        _kw("seeds", None, str | None, "--seeds", help=_seeds_help(exp)),
        _kw("as_json", False, bool, "--json", help="Print the tables as JSON instead of text (no progress lines)."),
    ]


def study_option(spec: Spec) -> inspect.Parameter:
    """The option of one ``Params`` field: a flag pair for a bool, text parsed by the field's type otherwise."""
    kw = inspect.Parameter.KEYWORD_ONLY
    if spec.shape == "flag":  # a pair when the default is on, so it can be turned off
        names = (f"{spec.flag}/--no-{spec.flag[2:]}",) if spec.default else (spec.flag,)
        return inspect.Parameter(
            spec.name,
            kw,
            default=bool(spec.default),
            annotation=_option(bool, *names, help=spec.help(), panel=PANEL_STUDY, show_default=False),
        )
    many = spec.shape in ("tuple", "map")
    annotation = list[str] | None if many else str | None
    return inspect.Parameter(
        spec.name,
        kw,
        default=None,
        annotation=_option(
            annotation, spec.flag, help=spec.help(), panel=PANEL_STUDY, metavar=spec.metavar, show_default=False
        ),
    )


def make_command(exp: Experiment) -> Callable[..., None]:
    """The command of ``exp``: its signature is its options (typer reads ``__signature__``)."""
    fields = specs(exp.Params)

    def command(**given: Any) -> None:
        run(exp, given)

    command.__signature__ = inspect.Signature([*(study_option(s) for s in fields), *common(exp)])  # type: ignore[attr-defined]
    command.__doc__ = escape(f"{exp.summary}\n\n{exp.description}\n\nExample: {exp.example}")
    return command


def run(exp: Experiment, given: dict[str, Any]) -> None:
    """Parse the options, build the base configuration, run the experiment, print."""
    from agentreplay.cli.config_build import build_config
    from agentreplay.cli.fleet_run import execute, parse_seeds, report

    try:
        p = build(exp.Params, {s.name: given[s.name] for s in specs(exp.Params)})
    except ValueError as exc:
        raise fail(str(exc)) from None
    seeds = parse_seeds(given["seeds"])
    hardware = {**exp.hardware, **{k: given[k] for k in ("gpu", "model", "tp") if given[k] is not None}}
    base = build_config(given["config"], {"hardware": hardware})
    outcome = execute(
        exp,
        p,
        base,
        given["trace"],
        given["out"],
        seeds=seeds,
        workers=given["workers"],
        dask=given["dask"],
        quiet=given["as_json"],
        title=f"fleet {exp.name}",
    )
    report(exp, outcome, given["as_json"])


for _exp in experiments().values():
    fleet_app.command(_exp.name)(make_command(_exp))
