"""``fleet-admission``: admit-all vs ThunderAgent's program-aware admission on a trace where KV is tight."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentreplay.cli.app import app
from agentreplay.cli.options import BUNDLED_TRACE, Config, FleetTrace, Json, MaxPrograms, NumGpuBlocks


@app.command("fleet-admission")
def fleet_admission(
    trace: FleetTrace = BUNDLED_TRACE,
    concurrency: Annotated[int, typer.Option(help="Programs in flight (closed loop).")] = 64,
    gpu: Annotated[str | None, typer.Option(help="GPU catalog name. Default: the config's (h100-sxm).")] = None,
    model: Annotated[str | None, typer.Option(help="Model catalog name. Default: the config's (llama-3.1-8b).")] = None,
    num_gpu_blocks: NumGpuBlocks = None,
    max_programs: MaxPrograms = None,
    config: Config = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (replaced).")] = Path("out/fleet-admission"),
    as_json: Json = False,
) -> None:
    """Admit-all vs ThunderAgent program-aware admission: JCT, throughput, preemptions, pauses; figure.

    Runs the trace three times on the same cluster: every call admitted (vLLM), ThunderAgent with the acting
    footprint decaying with a 1 s half-life, and ThunderAgent without decay (agentreplay.router.thunderagent).
    Writes table.md, summary.json (per variant, with the admitted-footprint time series) and admission.png.

    Example: agentreplay fleet-admission --trace datasets/swebench-verified --concurrency 64 --out out/fleet-admission
    """
    from agentreplay.cli.fleet_common import base_config, run_study
    from agentreplay.fleet.admission_study import ADMISSION_VARIANTS, admission_study, plot_admission

    base = base_config(
        config,
        {
            "hardware": {"gpu": gpu, "model": model},
            "cache": {"num_gpu_blocks": num_gpu_blocks},
            "workload": {"arrival": "closed", "concurrency": concurrency, "max_programs": max_programs},
        },
    )
    hw = base.hardware
    title = (
        f"admission on {trace.name}: {hw.model} on {hw.instances}x {hw.gpu}, {concurrency} programs in flight, "
        f"KV blocks {base.cache.num_gpu_blocks or 'from the memory model'}"
    )
    run_study(trace, base, ADMISSION_VARIANTS, admission_study, plot_admission, out, "admission", title, as_json)
