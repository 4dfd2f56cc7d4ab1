"""``fleet-footprint``: KV footprint of live sessions over time on the bundled trace, compared across clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentreplay.cli.app import app, console, fail, print_json, show, table
from agentreplay.cli.options import BUNDLED_TRACE, FleetTrace, Json, MaxPrograms


@app.command("fleet-footprint")
def fleet_footprint(
    trace: FleetTrace = BUNDLED_TRACE,
    out: Annotated[Path, typer.Option("--out", help="Folder for footprint.png / .md / summary.json.")] = Path(
        "reports/fleet/footprint"
    ),
    gpu: Annotated[str, typer.Option(help="GPU of every instance.")] = "h100-sxm",
    model: Annotated[str, typer.Option(help="Model.")] = "llama-3.1-8b",
    concurrency: Annotated[int, typer.Option(help="Programs in flight (closed loop).")] = 64,
    interval: Annotated[float, typer.Option(help="Seconds between footprint samples per instance.")] = 10.0,
    max_programs: MaxPrograms = None,
    as_json: Json = False,
) -> None:
    """KV footprint of live sessions over time: 1 and 4 H100s, least-loaded vs agent-affinity.

    Runs the trace on 1 x GPU (least-loaded), 4 x GPU (least-loaded) and 4 x GPU (agent-affinity preset) with the
    footprint series on, and prints per cluster the peak and mean GiB of HBM KV held by running calls, waiting
    calls, programs idle in a tool call, the prefix cache and free memory, with GPU-hours per 1,000 tasks
    (attributed to programs vs GPUs x makespan). Writes a stacked-area figure per cluster.

    Example: agentreplay fleet-footprint --trace datasets/swebench-verified --out reports/fleet/footprint
    """
    from agentreplay.fleet import footprint as F
    from agentreplay.sim import SimConfig
    from agentreplay.sim.config import ConfigError
    from agentreplay.trace.io import TraceError, read_trace

    try:
        tr = read_trace(trace)
        base = SimConfig().replace(
            hardware={"gpu": gpu, "model": model},
            workload={"concurrency": concurrency, "max_programs": max_programs},
        )
        runs = [F.run_cluster(tr, base, c, interval) for c in F.DEFAULT_CLUSTERS]
        setting = (
            f"Run: {model} on {gpu}, {concurrency} programs in flight (closed loop), trace `{trace}`"
            + (f" (first {max_programs} programs)" if max_programs else "")
            + f", a sample per instance at most every {interval:g} s."
        )
        written = F.write(runs, out, setting)
    except (TraceError, ConfigError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json([r.summary for r in runs])
        return
    title = f"KV footprint of live sessions ({model} on {gpu}, {concurrency} in flight)"
    show(table(title, *F.table_rows(runs), left=2))
    show(table("GPU time per 1,000 tasks (attributed vs fleet: the difference is idle GPU time)", *F.gpu_rows(runs)))
    console.print(f"wrote {', '.join(str(p) for p in written)}", markup=False, soft_wrap=True)
