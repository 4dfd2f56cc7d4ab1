"""``fleet-priority``: FCFS vs priority classes, with and without deadline admission, on a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentreplay.cli.app import app, fail
from agentreplay.cli.options import BUNDLED_TRACE, Config, FleetTrace, Json, MaxPrograms, NumGpuBlocks


def _per_class(value: str | None, option: str) -> dict[str, float]:
    """``interactive=600,batch=3600`` -> {class: value}."""
    out: dict[str, float] = {}
    for part in (value or "").split(","):
        if not part.strip():
            continue
        name, _, v = part.partition("=")
        try:
            out[name.strip()] = float(v)
        except ValueError:
            raise fail(f"{option} {value!r}: expected CLASS=NUMBER pairs, e.g. interactive=600") from None
    return out


@app.command("fleet-priority")
def fleet_priority(
    trace: FleetTrace = BUNDLED_TRACE,
    concurrency: Annotated[int, typer.Option(help="Programs in flight (closed loop).")] = 64,
    mix: Annotated[
        str | None,
        typer.Option(help="Class shares, e.g. interactive=0.2,background=0.3,batch=0.5. Default: that mix."),
    ] = None,
    deadline_x: Annotated[
        str | None,
        typer.Option(
            help="Per-class deadline, multiple of uncontended JCT, e.g. interactive=1.5. Default: interactive=1.5, "
            "background=3, batch=10."
        ),
    ] = None,
    deadline_s: Annotated[
        str | None,
        typer.Option(help="Per-class absolute deadline, seconds (overrides deadline-x for that class). Default: none."),
    ] = None,
    num_gpu_blocks: NumGpuBlocks = None,
    max_programs: MaxPrograms = None,
    config: Config = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (replaced).")] = Path("out/fleet-priority"),
    as_json: Json = False,
) -> None:
    """FCFS vs priority classes, with and without deadline admission: goodput and JCT per class; figure.

    Programs get a class (interactive, background, batch) from the trace's priority_class column or a seeded draw
    from the mix, and a JCT deadline per class. Four runs: vLLM FCFS; vLLM priority scheduling (queue by class
    then arrival, preempt the lowest class); priority plus deadline admission that defers late programs' calls;
    priority plus deadline admission that rejects programs that cannot meet their deadline even alone
    (agentreplay.router.deadline). Writes table.md, summary.json and priority.png.

    Example: agentreplay fleet-priority --trace datasets/swebench-verified --deadline-s interactive=900
    """
    from agentreplay.cli.fleet_common import base_config, run_study
    from agentreplay.fleet.admission_study import PRIORITY_VARIANTS, plot_priority, priority_study

    classes: dict[str, object] = {"enabled": True}
    if mix:
        classes["mix"] = _per_class(mix, "--mix")
    if deadline_x:
        classes["deadline_x"] = _per_class(deadline_x, "--deadline-x")
    if deadline_s:
        classes["deadline_s"] = _per_class(deadline_s, "--deadline-s")
    base = base_config(
        config,
        {
            "cache": {"num_gpu_blocks": num_gpu_blocks},
            "workload": {"arrival": "closed", "concurrency": concurrency, "max_programs": max_programs},
            "classes": classes,
        },
    )
    c = base.classes
    dl = ", ".join(
        f"{k} {c.deadline_s[k]:g} s" if k in c.deadline_s else f"{k} {c.deadline_x[k]:g}x"
        for k in ("interactive", "background", "batch")
    )
    title = f"priority classes on {trace.name}: {concurrency} programs in flight, deadlines {dl}"
    run_study(trace, base, PRIORITY_VARIANTS, priority_study, plot_priority, out, "priority", title, as_json)
