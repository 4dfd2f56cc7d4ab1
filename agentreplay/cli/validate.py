"""``calibrate`` and ``validate``: thin shells over :mod:`validation.calibration.calibrate` and
:mod:`validation.validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentreplay.cli.groups.validate import validate_app
from agentreplay.cli.output import console, fail, print_json, show

#: Options both commands take: extra measured sources, and whether ../shared/measurements is read too.
Measured = Annotated[
    list[Path] | None,
    typer.Option(
        "--measured",
        help="Extra measured source (repeatable); "
        "format auto-detected by the registered collectors. Default: "
        "none (../shared/measurements only).",
    ),
]
NoDefaults = Annotated[
    bool, typer.Option("--no-default-sources", help="Use only --measured paths, not ../shared/measurements.")
]


def _pct(v: float | None) -> str:
    return "-" if v is None or v != v else f"{v:.1f}"  # None / NaN -> "-"


@validate_app.command()
def calibrate(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Catalog folder to write: gpus.toml, roofline.toml, tables.toml and calibration.json (with "
            "--engine-cost: engine_cost.json). Default: the packaged catalog, rewritten in place. With "
            "--calibration: the JSON file of the fit.",
        ),
    ] = None,
    measured: Measured = None,
    no_defaults: NoDefaults = False,
    calibration: Annotated[
        list[str] | None,
        typer.Option(
            "--calibration",
            help="End-to-end mode: cell-id glob of the measured runs that fit the per-step engine cost "
            "(repeatable); every other end-to-end cell of the --measured runs is held out and its error printed. Reads "
            "only the --measured runs. Default: none (fit the component profiles instead).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the calibration summary as JSON.")] = False,
    engine_cost: Annotated[
        bool,
        typer.Option(
            "--engine-cost",
            help="End-to-end mode for inference-perf runs: fit the engine cost beyond the kernels and the client "
            "path on every replayable inference-perf run of --measured (default: ../shared/measurements/"
            "serving-vllm-inference-sim), once on all and once per left-out (GPU, model, TP) configuration; write "
            "engine_cost.json into the catalog (the packaged one, or the --out folder). Minutes on 2 cores.",
        ),
    ] = False,
    max_evals: Annotated[
        int, typer.Option("--max-evals", min=4, help="--engine-cost: simulations per fit (Nelder-Mead budget).")
    ] = 40,
    fit_terms: Annotated[
        str | None,
        typer.Option(
            "--fit-terms",
            help="--engine-cost: the engine terms to fit, comma-separated (default: fixed_ms, per_seq_us, "
            "kernel_gap_us, sampler_bytes_per_logit); attn_decode_efficiency and custom_allreduce_us may be freed "
            "on top (the shipped fit ties them to the GPU catalogue; the performance-model docs page says why)",
        ),
    ] = None,
) -> None:
    """Fit per-GPU efficiencies to the measured component profiles.

    With ``--calibration``, fit the per-step engine cost end to end on measured runs with a declared split.

    Example: agentreplay calibrate            (rewrites the packaged catalog: agentreplay/perf/catalog)
    Example: agentreplay calibrate --measured runs/ --calibration 'vllm-run/*/1rps'
    """
    if fit_terms is not None and not engine_cost:
        raise fail("--fit-terms applies to --engine-cost only")
    if engine_cost:
        terms = [t.strip() for t in fit_terms.split(",")] if fit_terms is not None else None
        _calibrate_engine_cost(measured or [], out, max_evals, as_json=as_json, terms=terms)
        return
    if calibration:
        from agentreplay.cli.e2e_fit import calibrate_end_to_end

        calibrate_end_to_end(measured or [], calibration, out, as_json=as_json)
        return
    from validation.calibration.calibrate import mape_table, run
    from validation.catalog import Catalog
    from validation.measured import load

    try:
        data = load([str(p) for p in measured or []], defaults=not no_defaults, kinds=("component",))
        summary = run(data, Catalog.create(out) if out is not None else None)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json({k: v for k, v in summary.items() if not k.startswith("_")})
        return
    table = Table(title="calibrated efficiencies (fitted parameters; the rest keep their catalog value)")
    for col in ("gpu", "fitted", "points cal/val", "op MAPE % cal", "op MAPE % val"):
        table.add_column(col)
    for g, v in summary["gpus"].items():
        eff = "\n".join(f"{k} = {v['efficiency'][k]:.4g}" for k in v["fitted"])
        if v["calibrated_from"]:
            eff = f"(from {v['calibrated_from']})\n{eff}"
        pts = v["points"]
        table.add_row(
            g,
            eff,
            f"{pts['calibration']}/{pts['validation']}",
            _pct(v["mape_pct"]["calibration"]),
            _pct(v["mape_pct"]["validation"]),
        )
    show(table)
    ops = mape_table(summary["_ops"]).reset_index()
    t2 = Table(title="operator fit error, MAPE % (per GPU and operator group)")
    for col in ops.columns:
        t2.add_column(str(col))
    for row in ops.itertuples(index=False):
        t2.add_row(*(_pct(x) if isinstance(x, float) or x is None else str(x) for x in row))
    show(t2)
    console.print(f"wrote {out or 'the packaged catalog'}: gpus.toml, roofline.toml, tables.toml, calibration.json")


def _calibrate_engine_cost(
    measured: list[Path], out: Path | None, max_evals: int, *, as_json: bool, terms: list[str] | None = None
) -> None:
    """``calibrate --engine-cost`` (validation/e2e/inference_perf_fit.py): fit, leave one configuration out,
    write, print."""
    from validation.catalog import PACKAGED, Catalog
    from validation.e2e import inference_perf_fit
    from validation.measured import Measured, collect_path, default_root

    paths = measured or [default_root() / "serving-vllm-inference-sim"]
    data = Measured()
    try:
        for p in paths:
            collect_path(p, data)
        terms_ = inference_perf_fit.check_terms(terms) if terms is not None else inference_perf_fit.ENGINE_TERMS
        target = Catalog.create(out) if out is not None else PACKAGED
        say = (lambda _s: None) if as_json else console.print
        full, loo = inference_perf_fit.calibrate(
            data.tables, catalog=target, max_evals=max_evals, log=say, sources=[str(p) for p in paths], terms=terms_
        )
    except (ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(
            {
                "fitted": full.cost.as_dict(),
                "loss": full.loss,
                "leave_one_configuration_out": {k: v.cost.as_dict() for k, v in loo.items()},
            }
        )
        return
    table = Table(title="engine cost and client path, fitted end to end (in sample; one row per left-out fit)")
    for col in ("fit", *full.cost.as_dict()):
        table.add_column(col)
    for name, o in [("all configurations", full), *((f"without {k}", v) for k, v in loo.items())]:
        table.add_row(name, *("tied" if x is None else f"{x:.4g}" for x in o.cost.as_dict().values()))
    show(table)
    console.print(f"wrote {target.folder / inference_perf_fit.ENGINE_COST}")


@validate_app.command()
def validate(
    out: Annotated[Path, typer.Option("--out", "-o", help="Report folder.")] = Path("reports/latest"),
    measured: Measured = None,
    live: Annotated[
        list[Path] | None,
        typer.Option(
            "--live",
            help="Live-engine comparison JSON "
            "(benchmarks/vllm_cpu/validate.py), repeatable; default: "
            "reports/live/*.json",
        ),
    ] = None,
    no_defaults: NoDefaults = False,
    quick: Annotated[bool, typer.Option(help="Skip the agent-JCT replay (the slowest cell).")] = False,
    catalog: Annotated[
        Path | None,
        typer.Option(
            help="Catalog folder to validate (gpus.toml, and roofline.toml, tables.toml, calibration.json, "
            "engine_cost.json where it holds them; the packaged ones otherwise), e.g. one `agentreplay calibrate "
            "--out` wrote. Default: the packaged catalog.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary (summary.json) as JSON instead of the tables.")
    ] = False,
    bundled_only: Annotated[
        bool,
        typer.Option(
            "--bundled-only",
            help="Validate only what ships with the project (the committed live-engine comparisons); without it, "
            "validate refuses to run when ../shared/measurements is missing.",
        ),
    ] = False,
) -> None:
    """Simulate every measured cell and compare: errors.parquet, report.md, report.html.

    Example: agentreplay validate --out reports/validation
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from agentreplay.outdir import staged
    from validation.catalog import Catalog
    from validation.validate import STEPS, run

    try:  # staged: a run that fails (e.g. no measured cell) leaves no folder behind, a rerun no stale figure
        with (
            staged(out, "validate") as tmp,
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
                disable=as_json,
            ) as bar,
        ):
            task = bar.add_task("validate", total=sum(w for _, w in STEPS))
            done: list[float] = []

            def progress(name: str, weight: float) -> None:  # the steps' measured shares of the wall time
                bar.update(task, completed=sum(done), description=name)
                done.append(weight)

            s = run(
                tmp,
                [str(p) for p in measured or []],
                defaults=not no_defaults,
                quick=quick,
                catalog=Catalog.open(catalog),
                live_paths=live,
                progress=progress,
                bundled_only=bundled_only,
            )
    except ValueError as exc:  # OutputDirError (a folder agentreplay did not write) is a ValueError
        raise fail(str(exc)) from None
    e2e = s.get("end_to_end", {})
    if as_json:
        print_json(s)
        return
    table = Table(title="end-to-end cells, misses first (worst judged metric, signed error %)")
    for col in ("cell", "judged metrics met", "worst metric", "error %", "verdict"):
        table.add_column(col)
    for c in e2e.get("cells_table", []):
        label = c["cell_id"] + (" (stand-in workload)" if c["workload"] == "stand-in" else "")
        table.add_row(
            label,
            f"{c['met']} / {c['metrics']}",
            str(c["worst_metric"]),
            _pct(c["worst_error_pct"]),
            "within target" if c["within_target"] else "missed",
        )
    show(table)
    comp = Table(title="component cells, default pricer: MAPE % by role (details and every pricer: report.md)")
    for col in ("gpu", "calibration", "validation"):
        comp.add_column(col)
    for g, v in s.get("component_mape_pct", {}).items():
        comp.add_row(g, _pct(v.get("calibration")), _pct(v.get("validation")))
    show(comp)
    console.print(f"wrote {out}/errors.parquet, {out}/report.md, {out}/report.html")
    if e2e.get("line"):
        console.print(f"[bold]{e2e['line']}[/bold]", markup=True, highlight=False)
