"""``fleet-disagg``: colocated vs disaggregated prefill / decode at equal GPU count."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentreplay.cli.app import app, console, fail, print_json, show, table
from agentreplay.cli.options import BUNDLED_TRACE, FleetTrace, Json, MaxPrograms


@app.command("fleet-disagg")
def fleet_disagg(
    trace: FleetTrace = BUNDLED_TRACE,
    gpus: Annotated[int, typer.Option(help="GPUs of every cluster compared (instances = GPUs / TP).")] = 4,
    gpu: Annotated[str, typer.Option(help="GPU of both pools (catalog name).")] = "h100-sxm",
    model: Annotated[str, typer.Option(help="Model (catalog name).")] = "llama-3.1-8b",
    tp: Annotated[int, typer.Option(help="TP of every instance.")] = 1,
    loads: Annotated[str, typer.Option(help="Programs in flight (closed loop), comma-separated.")] = "32,64",
    session_home: Annotated[
        str, typer.Option(help='[disagg] session_home: "decode" (next turn pulls its prefix) or "none".')
    ] = "decode",
    link: Annotated[str, typer.Option(help='[disagg] link: "rdma" (50 GB/s per GPU) or "nvlink".')] = "rdma",
    first_token: Annotated[
        str, typer.Option(help='[disagg] first_token: the client\'s first token from "decode" (vLLM) or "prefill".')
    ] = "decode",
    max_programs: MaxPrograms = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for disagg.md, disagg.png, rows.json.")] = Path(
        "reports/fleet/disagg"
    ),
    as_json: Json = False,
) -> None:
    """Colocated vs disaggregated prefill / decode at equal GPU count.

    Runs the colocated cluster and every split kP+(n-k)D of the same GPUs (agentreplay.sim.disagg: prefill pool,
    decode pool, KV moved over the link after prefill) on the trace at each load, and prints JCT p50 / p90, TTFT
    p50 / p99, TPOT p50, throughput, GPU-hours per 1,000 tasks, KV moved and pool utilisation; writes the table as
    Markdown and a figure.

    Example: agentreplay fleet-disagg --trace datasets/swebench-verified --gpus 4 --gpu h100-sxm --out
    reports/fleet/disagg
    """
    import json

    from agentreplay.fleet.disagg import COLUMNS, compare, plot, to_markdown
    from agentreplay.sim.config import ConfigError, SimConfig
    from agentreplay.sim.run import CapacityError
    from agentreplay.sim.workload import compile_trace
    from agentreplay.trace.io import TraceError, read_trace

    try:
        levels = [int(x) for x in loads.split(",") if x.strip()]
        if not levels or min(levels) < 1:
            raise ValueError
    except ValueError:
        raise fail(f"--loads {loads!r}: give programs in flight as integers >= 1, comma-separated") from None
    try:
        base = SimConfig().replace(
            hardware={"gpu": gpu, "model": model, "tp": tp},
            workload={"max_programs": max_programs},
            disagg={"session_home": session_home, "link": link, "first_token": first_token},
        )
        workload = compile_trace(read_trace(trace))
        with console.status("simulating") as status:
            rows = compare(
                workload, base, gpus, levels, progress=lambda c: status.update(f"done {c.name} at {c.load} in flight")
            )
    except (ConfigError, CapacityError, TraceError, ValueError) as exc:
        raise fail(str(exc)) from None
    title = f"{model} on {gpus}x {gpu} (TP {tp}), {trace.name}, session_home={session_home}, link={link}"
    if first_token != "decode":
        title += f", first token from {first_token}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "disagg.md").write_text(to_markdown(rows, title))
    (out / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    plot(rows, out / "disagg.png", title)
    if as_json:
        print_json(rows)
        return
    cells = [
        [r["load"], r["cluster"], *(f"{r[c]:.0%}" if c.startswith("util") else f"{r[c]:.3g}" for c in COLUMNS[2:])]
        for r in rows
    ]
    show(table(title, COLUMNS, cells, left=2))
    console.print(f"wrote {out}: disagg.md, disagg.png, rows.json", markup=False, soft_wrap=True)
