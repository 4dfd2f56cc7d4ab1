"""``fleet-failover``: replica failures on the bundled trace, the failover ledger, and the age-aware remedy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentreplay.cli.app import app, console, fail, print_json, show, table
from agentreplay.cli.options import BUNDLED_TRACE, FleetTrace, Json, MaxPrograms


def _table(title: str, df: object) -> Table:
    import pandas as pd

    assert isinstance(df, pd.DataFrame)
    return table(title, list(df.columns), [[_cell(v) for v in row] for row in df.itertuples(index=False, name=None)])


def _cell(v: object) -> str:
    if isinstance(v, float):
        return "-" if v != v else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


@app.command("fleet-failover")
def fleet_failover(
    trace: FleetTrace = BUNDLED_TRACE,
    instances: Annotated[int, typer.Option(help="Instances in the cluster.")] = 4,
    gpu: Annotated[str, typer.Option(help="GPU catalog name.")] = "h100-sxm",
    model: Annotated[str, typer.Option(help="Model catalog name.")] = "llama-3.1-8b",
    concurrency: Annotated[int, typer.Option(help="Programs in flight (closed loop).")] = 64,
    router: Annotated[str, typer.Option(help="Router policy (agentreplay simulate --router).")] = "session-affinity",
    num_gpu_blocks: Annotated[
        int | None,
        typer.Option(
            help="KV blocks per instance (16 tokens each); the default 16,000 (256k tokens) makes the survivors "
            "memory-bound after a failure, where preemption choices matter. 0 = the memory model's count."
        ),
    ] = 16_000,
    fail_at: Annotated[
        list[float] | None,
        typer.Option("--fail-at", help="Failure time, seconds (repeat for several). Default: 600, 1500, 2400."),
    ] = None,
    fail_instance: Annotated[
        list[int] | None,
        typer.Option(
            "--fail-instance", help="Instance of each --fail-at, in order (repeat; cycled). Default: 1, 2, 3, ..."
        ),
    ] = None,
    kind: Annotated[str, typer.Option(help="fail (lose everything at once) or drain (finish, then go down).")] = "fail",
    recover_after: Annotated[
        float, typer.Option(help="Seconds until a failed instance is back, empty (negative: never).")
    ] = 300.0,
    max_programs: MaxPrograms = None,
    seed: Annotated[int, typer.Option(help="Run seed.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Folder for the ledgers, tables and figure (replaced as a whole). Default: none (print only).",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Replica failures: the failover ledger and JCT impact by program age, with and without the remedy.

    Runs the trace three times on the same cluster: no failure; the failures (each instance loses its GPU at its
    time: running and waiting calls are retried through the router and re-prefill, programs homed there lose
    their cached KV); and the failures with the remedy (re-routed programs placed oldest first on the
    least-loaded survivor with room, and the youngest-first preemption victim). Prints the JCT of the affected
    programs by age (turns done at the failure) in the three runs and writes the ledgers and a figure.

    Example: agentreplay fleet-failover --fail-at 600 --fail-instance 1 --out reports/fleet/failover
    """
    from agentreplay.fleet import failover as fo
    from agentreplay.outdir import OutputDirError, staged
    from agentreplay.sim.config import ConfigError, SimConfig
    from agentreplay.sim.workload import load_workload
    from agentreplay.trace.io import TraceError

    if kind not in ("fail", "drain"):
        raise fail(f"--kind {kind!r}: one of fail, drain")
    times = fail_at if fail_at else [600.0, 1500.0, 2400.0]
    which = fail_instance if fail_instance else [1 + k % max(1, instances - 1) for k in range(len(times))]
    events = [
        {
            "instance": which[k % len(which)],
            "at_s": t,
            "kind": kind,
            **({"recover_after_s": recover_after} if recover_after >= 0 else {}),
        }
        for k, t in enumerate(times)
    ]
    try:
        base = SimConfig().replace(
            hardware={"instances": instances, "gpu": gpu, "model": model},
            workload={"concurrency": concurrency, "max_programs": max_programs},
            router={"policy": router},
            cache={"num_gpu_blocks": num_gpu_blocks or None},
            seed=seed,
        )
        configs = fo.study_configs(base, events)
        w = load_workload(trace)
    except (ConfigError, TraceError, ValueError) as exc:
        raise fail(str(exc)) from None
    try:
        study = fo.run_study(w, configs, progress=None if as_json else lambda n: console.print(f"ran {n}"))
    except (ConfigError, RuntimeError, ValueError) as exc:
        raise fail(str(exc)) from None
    table, runs = fo.by_age(study), fo.run_summary(study)
    setting = (
        f"{instances} x {model} on {gpu}, {concurrency} programs in flight, router {router}, "
        f"{num_gpu_blocks or 'memory-model'} KV blocks per instance; events: "
        + ", ".join(f"instance {e['instance']} {e['kind']} at {e['at_s']:g} s" for e in events)
        + (f", back after {recover_after:g} s" if recover_after >= 0 else ", never back")
    )
    if as_json:
        print_json({"setting": setting, "runs": runs.to_dict("records"), "by_age": table.to_dict("records")})
    else:
        console.print(setting)
        show(_table("runs", runs))
        show(_table("programs the failures hit, by age at the first hit (JCT means in seconds)", table))
    if out is None:
        return
    try:
        with staged(out, "fleet-failover") as tmp:
            for name, led in study.ledgers.items():
                led.to_parquet(tmp / f"ledger_{name}.parquet", index=False)
            (tmp / "failover.md").write_text(fo.markdown(table, runs, setting))
            (tmp / "summary.json").write_text(
                json.dumps({"setting": setting, "events": events, "runs": runs.to_dict("records")}, indent=2) + "\n"
            )
            fo.write_figure(tmp / "jct_by_age.png", study, table)
    except OutputDirError as exc:
        raise fail(str(exc)) from None
    if not as_json:
        console.print(f"wrote {out}/failover.md, jct_by_age.png, ledger_failure.parquet, ledger_remedy.parquet")
