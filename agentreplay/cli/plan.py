"""``plan``: the cheapest configuration that meets a service-level objective at a sustained load."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from agentreplay.cli.app import app, console, err, fail, print_json, show


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


@app.command()
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
            "--presets", help="Policy presets to try, comma-separated (agentreplay simulate --help lists them)."
        ),
    ] = "vllm",
    max_instances: Annotated[
        int, typer.Option(help="Largest instance count tried per GPU / model / TP / preset.")
    ] = 16,
    max_programs: Annotated[
        int | None,
        typer.Option(help="Replay only the trace's first N programs (faster; said in the output). Default: all."),
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
            "the worst."
        ),
    ] = "0",
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
            help="Output folder: plan.md, plan.json, "
            "configurations.csv, cost_vs_slo.png and the sweep results (sweep/, reused "
            "when the same plan runs again into it).",
        ),
    ] = Path("out/plan"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Find the cheapest fleet that meets an objective at a load.

    Cost in GPU-hours per 1,000 tasks at a sustained load; a configuration is a GPU, model, TP, preset and
    instance count. Reported: the runners-up, each figure's error band, a figure of cost vs the objective's
    metrics, and every configuration tried with its wall time.

    Per GPU / model / TP / preset the instance count is searched (1, 2, 3, 5, 8, ... until the objective is met,
    then bisection), assuming more instances never hurt (checked on the results); the cheapest pending
    configurations run first and families that cannot place among the cheapest stop early. The cells run on the
    sweep engine (local pool or Dask). Objective grammar and cost definition: reports/plan/README.md and
    agentreplay/plan/slo.py.

    Example: agentreplay plan --trace datasets/swebench-verified --load 0.1 --slo "jct_p90<=600"
    --gpus h100-sxm,b200 --tp 1,2 --presets vllm,sglang --out out/plan
    """
    from agentreplay.outdir import OutputDirError, check, mark
    from agentreplay.plan import PlanError, PlanRequest, SloError, parse_slo
    from agentreplay.plan import plan as run_plan
    from agentreplay.plan.figure import draw
    from agentreplay.plan.report import headline, to_dict, write
    from agentreplay.sim.config import ConfigError, load_toml_as
    from agentreplay.sweep import make_executor

    try:
        terms = parse_slo(slo)
    except SloError as exc:
        raise fail(f"--slo: {exc}") from None
    if not trace.is_dir():
        raise fail(f"--trace {trace}: no such folder")
    if max_programs is not None and max_programs < 1:
        raise fail(f"--max-programs {max_programs}: must be >= 1")
    if runners_up < 0:
        raise fail(f"--runners-up {runners_up}: must be >= 0")
    base: dict[str, Any] = {}
    if config is not None:
        try:
            base = load_toml_as(config, lambda d: d, ConfigError)
        except ConfigError as exc:
            raise fail(str(exc)) from None
    req = PlanRequest(
        trace.resolve(),
        load,
        terms,
        _names(gpus, "--gpus"),
        _names(models, "--models"),
        _ints(tp, "--tp"),
        _names(presets, "--presets"),
        max_instances,
        max_programs,
        runners_up,
        _seeds(seeds),
        base,
    )
    try:
        check(out, "plan")
    except OutputDirError as exc:
        raise fail(str(exc)) from None
    if workers is not None and workers < 1:
        raise fail(f"--workers {workers} is invalid: >= 1")
    if executor_kind not in (None, "local", "dask"):
        raise fail(f"--executor {executor_kind!r}: local or dask")
    if executor_kind == "dask" and not scheduler_address:
        raise fail("--executor dask needs --scheduler-address tcp://HOST:PORT (a running Dask scheduler)")
    if executor_kind == "local" and scheduler_address:
        raise fail("--executor local and --scheduler-address contradict each other; drop one")
    try:
        executor = make_executor(workers, scheduler_address)
    except (OSError, TimeoutError, ValueError) as exc:
        raise fail(escape(f"cannot start the executor ({scheduler_address or 'local pool'}): {exc}")) from None
    say = err if as_json else console

    def progress(round_no: int | str, probes: list[Any]) -> None:
        say.print(
            f"{'round ' if isinstance(round_no, int) else ''}{round_no}: {len(probes)} configuration(s): "
            + ", ".join(f"{n}x {f.gpu} tp{f.tp} {f.preset}" for f, n in probes),
            markup=False,
            soft_wrap=True,
        )

    say.print(
        f"plan: {len(req.gpus) * len(req.models) * len(req.tps) * len(req.presets)} GPU/model/TP/preset "
        f"families on {executor.description}",
        markup=False,
    )
    try:
        with executor:
            out.mkdir(parents=True, exist_ok=True)
            mark(out, "plan")
            result = run_plan(req, executor, out, progress=progress)
    except (PlanError, ConfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    data = to_dict(result)
    write(result, out, data)
    if data["configurations"]:
        draw(data, out / "cost_vs_slo.png")
    if as_json:
        print_json(data)
        raise typer.Exit(0 if data["chosen"] else 1)
    _render(data)
    console.print(headline(data), markup=False, soft_wrap=True)
    console.print(
        f"wrote {out}/plan.md, plan.json, configurations.csv, cost_vs_slo.png and sweep/ (query: "
        f'agentreplay query "select * from results" --data {out}/sweep)',
        markup=False,
        soft_wrap=True,
    )
    if data["chosen"] is None:
        raise typer.Exit(1)


def _render(data: dict[str, Any]) -> None:
    metrics = [s.split("<=")[0].split(">=")[0] for s in data["slo"]]
    subset = f"first {data['programs']} programs" if data["max_programs"] else f"all {data['programs']} programs"
    seeds = data.get("seeds", [data["seed"]])
    if len(seeds) > 1:
        subset += f", {len(seeds)} seeds each, figures the worst"
    t = Table(
        title=f"{data['configurations_tried']} configurations tried ({subset}, Poisson "
        f"{data['load_programs_per_s']:g} programs/s, objective {', '.join(data['slo'])})"
    )
    for col in (
        "round",
        "configuration",
        "GPUs",
        "GPU-h/1k tasks",
        *(c for m in metrics for c in (m, "band")),
        "meets",
        "wall s",
    ):
        t.add_column(col, justify="left" if col in ("configuration", "band") else "right")
    chosen = data["chosen"]["cell_id"] if data["chosen"] else None
    for r in data["configurations"]:
        mark_ = " <- chosen" if r["cell_id"] == chosen and r["round"] != "check" else ""
        bands = (x for m in metrics for x in (_num(r[m]), r[f"{m} band"].split(" (")[0]))
        t.add_row(
            str(r["round"]),
            escape(r["label"] + mark_),
            str(r["gpus"]),
            f"{r['gpu_hours_per_1000_tasks']:.3g}",
            *bands,
            "yes" if r["feasible"] else "no",
            f"{r['wall_s']:.2f}" + (" (reused)" if r["reused"] else ""),
        )
    show(t)
    if data["runners_up"]:
        console.print(
            "runners-up: "
            + "; ".join(f"{r['label']} ({r['gpu_hours_per_1000_tasks']:.3g} GPU-h/1k)" for r in data["runners_up"]),
            markup=False,
            soft_wrap=True,
        )
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
    return "-" if v is None else f"{v:.4g}"
