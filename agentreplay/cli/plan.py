"""``plan``: the cheapest configuration that meets a service-level objective at a sustained load."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from agentreplay.cli.groups.sim import sim_app
from agentreplay.cli.output import console, err, fail, print_json, show


def _names(value: str, option: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not names:
        raise fail(f"{option} {value!r}: give at least one comma-separated name")
    return names


def _seeds(value: str) -> tuple[int, ...]:
    try:
        out = tuple(dict.fromkeys(int(v) for v in _names(value, "--seeds")))
    except ValueError:
        raise fail(f"--seeds {value!r}: expected comma-separated non-negative integers, e.g. 0,1,2") from None
    if any(v < 0 for v in out):
        raise fail(f"--seeds {value!r}: seeds must be >= 0")
    return out


def _ints(value: str, option: str) -> tuple[int, ...]:
    try:
        out = tuple(dict.fromkeys(int(v) for v in _names(value, option)))
    except ValueError:
        raise fail(f"{option} {value!r}: expected comma-separated positive integers, e.g. 1,2,4") from None
    if any(v < 1 for v in out):
        raise fail(f"{option} {value!r}: every value must be >= 1")
    return out


@sim_app.command()
def plan(
    trace: Annotated[Path, typer.Option("--trace", "-t", help="Canonical trace folder (the programs replayed).")],
    load: Annotated[
        float,
        typer.Option(
            "--load",
            help="Sustained load: Poisson program arrivals, programs per second (86,400 x this = tasks a day).",
        ),
    ],
    slo: Annotated[
        str,
        typer.Option(
            "--slo",
            help="Objective, terms joined by ',': METRIC<=SECONDS with METRIC "
            "jct|ttft|tpot|queued _ p50|p90|p99|mean, or goodput@SECONDS>=FRACTION "
            '(share of programs with JCT <= SECONDS); e.g. "jct_p90<=600", '
            '"jct_p99<=1800,goodput@900>=0.9".',
        ),
    ],
    gpus: Annotated[
        str, typer.Option("--gpus", help="GPUs to try, comma-separated catalogue names (agentreplay catalog).")
    ] = "h100-sxm",
    models: Annotated[str, typer.Option("--models", help="Models to try, comma-separated.")] = "llama-3.1-8b",
    tp: Annotated[str, typer.Option("--tp", help="Tensor-parallel degrees to try, comma-separated.")] = "1",
    presets: Annotated[
        str,
        typer.Option(
            "--presets",
            help="Policy presets to try, comma-separated (agentreplay simulate --help lists them), or 'all'.",
        ),
    ] = "vllm",
    max_instances: Annotated[
        int, typer.Option(help="Largest instance count tried per GPU / model / TP / preset.")
    ] = 16,
    max_programs: Annotated[
        int | None,
        typer.Option(help="Replay only the trace's first N programs (faster; said in the output). Default: all."),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            help="vLLM --max-model-len for every configuration, tokens: longer requests are rejected (an agent "
            "program stops at its first rejected call), so a GPU / TP whose KV cannot hold the longest request "
            "can start. Default: none (the configuration must hold the longest request)."
        ),
    ] = None,
    runners_up: Annotated[int, typer.Option(help="Runners-up to report (and keep searching for).")] = 3,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Base simulate config TOML (tools, "
            "cache, scheduler ...); the plan sets hardware gpu / model / tp "
            "/ instances, the preset's policies and the arrivals. Default: "
            "the simulator's defaults.",
        ),
    ] = None,
    seeds: Annotated[
        str,
        typer.Option(
            help="Seeds (arrivals, tools), comma-separated: each configuration runs "
            "once per seed and meets the objective only under every seed, judged on "
            "the worst; the spread over the seeds decides which differences are ties. Default: 0,1,2."
        ),
    ] = "0,1,2",
    prices: Annotated[
        Path | None,
        typer.Option(
            "--prices",
            help="TOML [prices] table (the format of agentreplay tasks --prices) with gpu_per_hour = { GPU = USD "
            "per GPU-hour, ... } for every --gpus, and dram_per_gib_hour / cxl_per_gib_hour where a configuration "
            "adds a host tier: cost in USD. Default: none (cost in GPU-hours, extra tiers in GiB-hours).",
        ),
    ] = None,
    executor_kind: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help="Where cells run: local (a process pool) or dask (needs --scheduler-address). Default: "
            "dask when --scheduler-address is given, else local.",
        ),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Local worker processes (default: one per CPU).")] = None,
    scheduler_address: Annotated[
        str | None,
        typer.Option(
            help="Run the cells on a Dask distributed cluster, e.g. tcp://10.0.0.5:8786 (workers need agentreplay "
            "and the trace path). Default: a local process pool."
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output folder, replaced as a whole by each run: plan.md, plan.json, configurations.csv, "
            "cost_vs_slo.png and the sweep results (sweep/; a rerun of the same plan reuses them, and an "
            "interrupted run keeps those it finished).",
        ),
    ] = Path("out/plan"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Find the cheapest fleet that meets an objective at a load.

    Cost per 1,000 tasks at a sustained load (GPU-hours and the host-memory tiers a preset adds, or USD with
    --prices); a configuration is a GPU, model, TP, preset and instance count. Among equally cheap
    configurations whose objective figures differ by less than the spread over the seeds, the simplest
    deployment wins (a tie, reported as one). Reported: the margin of the chosen configuration and its seed
    spread, the error band of the closest validated cells (or the nearest and how they err), why the other
    configurations fail and what would make them run, the runners-up and a figure of cost vs the objective.

    Per GPU / model / TP / preset the instance count is searched (1, 2, 3, 5, 8, ... until the objective is met,
    then bisection), assuming more instances never hurt (checked on the results); the cheapest pending
    configurations run first and families that cannot place among the cheapest stop early. The cells run on the
    sweep engine (local pool or Dask). Objective grammar and cost definition: reports/plan/README.md and
    agentreplay/plan/.

    Example: agentreplay plan --trace datasets/swebench-verified --load 0.05 --slo "jct_p90<=900"
    --models llama-3.1-70b --gpus h100-sxm --tp 2,4,8 --presets all --out out/plan
    """
    from agentreplay.outdir import OutputDirError, check
    from agentreplay.plan import PlanError
    from agentreplay.plan import plan as run_plan
    from agentreplay.plan.figure import draw
    from agentreplay.plan.output import plan_output
    from agentreplay.plan.report import decision_lines, headline, to_dict, write
    from agentreplay.plan.search import fingerprint, prepare
    from agentreplay.sim.config import ConfigError

    req = _request(
        trace=trace,
        load=load,
        slo=slo,
        gpus=gpus,
        models=models,
        tp=tp,
        presets=presets,
        max_instances=max_instances,
        max_programs=max_programs,
        max_model_len=max_model_len,
        runners_up=runners_up,
        config=config,
    )
    req = _with(req, seeds=_seeds(seeds), prices=_prices(prices))
    try:
        prep = prepare(req)
        check(out, "plan")
    except (PlanError, OutputDirError) as exc:
        raise fail(escape(str(exc))) from None
    executor = _executor(executor_kind, workers, scheduler_address)
    say = err if as_json else console
    say.print(f"plan: {len(prep.states)} GPU/model/TP/preset families on {executor.description}", markup=False)
    staging = None
    try:
        with executor, plan_output(out, fingerprint(req, prep)) as staging:
            result = run_plan(req, executor, staging.path, progress=_progress(say), prepared=prep)
            data = to_dict(result)
            write(result, staging.path, data)
            if data["configurations"]:
                draw(data, staging.path / "cost_vs_slo.png")
    except KeyboardInterrupt:
        err.print(f"interrupted: {staging.kept if staging else f'{out} left as it was'}", markup=False)
        raise typer.Exit(130) from None
    except (PlanError, ConfigError, OutputDirError, ValueError) as exc:
        raise fail(escape(str(exc))) from None
    if as_json:
        print_json(data)
        raise typer.Exit(0 if data["chosen"] else 1)
    _render(data)
    for line in decision_lines(data):
        console.print(line, markup=False, soft_wrap=True)
    console.print(headline(data), markup=False, soft_wrap=True)
    console.print(
        f"wrote {out}/plan.md, plan.json, configurations.csv, cost_vs_slo.png and sweep/ (query: "
        f'agentreplay query "select * from results" --data {out}/sweep)',
        markup=False,
        soft_wrap=True,
    )
    if data["chosen"] is None:
        raise typer.Exit(1)


def _request(
    *,
    trace: Path,
    load: float,
    slo: str,
    gpus: str,
    models: str,
    tp: str,
    presets: str,
    max_instances: int,
    max_programs: int | None,
    max_model_len: int | None,
    runners_up: int,
    config: Path | None,
) -> Any:
    """The plan request from the options; every value checked (``fail`` naming the option), nothing run."""
    from agentreplay.plan import PlanRequest, SloError, parse_slo
    from agentreplay.policy.presets import PRESETS
    from agentreplay.sim.config import ConfigError, load_toml_as

    try:
        terms = parse_slo(slo)
    except SloError as exc:
        raise fail(escape(f"--slo: {exc}")) from None
    if not trace.is_dir():
        raise fail(f"--trace {trace}: no such folder")
    if max_programs is not None and max_programs < 1:
        raise fail(f"--max-programs {max_programs}: must be >= 1")
    if max_model_len is not None and max_model_len < 2:
        raise fail(f"--max-model-len {max_model_len}: must be >= 2 tokens")
    if runners_up < 0:
        raise fail(f"--runners-up {runners_up}: must be >= 0")
    base: dict[str, Any] = {}
    if config is not None:
        try:
            base = load_toml_as(config, lambda d: d, ConfigError)
        except ConfigError as exc:
            raise fail(escape(str(exc))) from None
    if max_model_len is not None:
        base = {**base, "scheduler": {**(base.get("scheduler") or {}), "max_model_len": max_model_len}}
    names = tuple(PRESETS) if presets.strip() == "all" else _names(presets, "--presets")
    return PlanRequest(
        trace.resolve(),
        load,
        terms,
        _names(gpus, "--gpus"),
        _names(models, "--models"),
        _ints(tp, "--tp"),
        names,
        max_instances,
        max_programs,
        runners_up,
        base=base,
    )


def _with(req: Any, **kw: Any) -> Any:
    import dataclasses

    return dataclasses.replace(req, **kw)


def _prices(path: Path | None) -> Any:
    from agentreplay.fleet.cost import PricesError, load_prices

    if path is None:
        return None
    try:
        return load_prices(path)
    except PricesError as exc:
        raise fail(escape(f"--prices: {exc}")) from None


def _executor(kind: str | None, workers: int | None, scheduler_address: str | None) -> Any:
    from agentreplay.sweep import make_executor

    if workers is not None and workers < 1:
        raise fail(f"--workers {workers} is invalid: >= 1")
    if kind not in (None, "local", "dask"):
        raise fail(f"--executor {kind!r}: local or dask")
    if kind == "dask" and not scheduler_address:
        raise fail("--executor dask needs --scheduler-address tcp://HOST:PORT (a running Dask scheduler)")
    if kind == "local" and scheduler_address:
        raise fail("--executor local and --scheduler-address contradict each other; drop one")
    try:
        return make_executor(workers, scheduler_address)
    except (OSError, TimeoutError, ValueError) as exc:
        raise fail(escape(f"cannot start the executor ({scheduler_address or 'local pool'}): {exc}")) from None


def _progress(say: Any) -> Any:
    def progress(round_no: int | str, probes: list[Any]) -> None:
        say.print(
            f"{'round ' if isinstance(round_no, int) else ''}{round_no}: {len(probes)} configuration(s): "
            + ", ".join(f"{n}x {f.gpu} tp{f.tp} {f.preset}" for f, n in probes),
            markup=False,
            soft_wrap=True,
        )

    return progress


def _render(data: dict[str, Any]) -> None:
    from agentreplay.plan.explain import lines
    from agentreplay.plan.report import cost_unit

    metrics = [s.split("<=")[0].split(">=")[0] for s in data["slo"]]
    subset = f"first {data['programs']} programs" if data["max_programs"] else f"all {data['programs']} programs"
    seeds = data.get("seeds", [data["seed"]])
    if len(seeds) > 1:
        subset += f", {len(seeds)} seeds each, figures the worst"
    t = Table(
        title=f"{data['configurations_tried']} configurations tried ({subset}, Poisson "
        f"{data['load_programs_per_s']:g} programs/s, objective {', '.join(data['slo'])}; cost {cost_unit(data)})"
    )
    for col in (
        "round",
        "configuration",
        "GPUs",
        "cost",
        *(c for m in metrics for c in (m, "spread", "band")),
        "meets",
    ):
        t.add_column(col, justify="left" if col in ("configuration", "band", "cost") else "right")
    t.add_column("wall s", justify="right")
    chosen = data["chosen"]["cell_id"] if data["chosen"] else None
    for r in data["configurations"]:
        mark_ = " <- chosen" if r["cell_id"] == chosen and r["round"] != "check" else ""
        figs = (x for m in metrics for x in (_num(r[m]), _num(r.get(f"{m} spread")), r[f"{m} band"]))
        t.add_row(
            str(r["round"]),
            escape(r["label"] + mark_),
            str(r["gpus"]),
            escape(r["cost"]),
            *figs,
            "yes" if r["feasible"] else "no",
            f"{r['wall_s']:.2f}" + (" (reused)" if r["reused"] else ""),
        )
    show(t)
    if data["runners_up"]:
        console.print(
            "runners-up: " + "; ".join(f"{r['label']} ({r['cost']})" for r in data["runners_up"]),
            markup=False,
            soft_wrap=True,
        )
    if data["failures"]:
        console.print("why configurations fail:", markup=False)
        for line in lines(data["failures"]):
            console.print(f"  {line}", markup=False, soft_wrap=True)
    v = data["monotonicity_violations"]
    console.print(
        f"monotonicity (more instances never hurt): {len(v)} violation(s)"
        if v
        else "monotonicity (more instances never hurt): no violation in the results",
        markup=False,
    )
    for line in v:
        console.print(f"  {line}", markup=False, soft_wrap=True)
    console.print(
        f"wall time {data['wall_s']:.1f} s for {data['configurations_tried']} configurations in "
        f"{data['rounds']} rounds on {data['executor']}",
        markup=False,
        soft_wrap=True,
    )


def _num(v: Any) -> str:
    """Four significant digits, never in exponent form: 611.9, 1078, 20,445."""
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
