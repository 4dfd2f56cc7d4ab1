"""``fleet-fanout``: sub-agent fan-out on the bundled trace under several routers (agentreplay.fleet.fanout)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer

from agentreplay.cli.app import app, console, fail, print_json, show, table
from agentreplay.cli.options import BUNDLED_TRACE, FleetTrace, Json


@app.command("fleet-fanout")
def fleet_fanout(
    trace: FleetTrace = BUNDLED_TRACE,
    programs: Annotated[int, typer.Option(help="Root programs taken from the start of the trace.")] = 100,
    fanout: Annotated[int, typer.Option("--fanout", help="Children per spawning turn.")] = 4,
    fanout_prob: Annotated[float, typer.Option("--fanout-prob", help="Chance that a non-last turn spawns.")] = 0.05,
    share: Annotated[
        str, typer.Option(help="Prefix a child shares with its parent: 'context' (the parent's prompt) or 'system'.")
    ] = "context",
    max_child_turns: Annotated[int, typer.Option(help="Cut each child after this many turns.")] = 10,
    spawn_delay: Annotated[float, typer.Option(help="Seconds from the spawning call's finish to the arrival.")] = 0.0,
    routers: Annotated[str, typer.Option(help="Comma-separated router names (agentreplay.router.policies).")] = (
        "cache-aware,least-loaded,round-robin"
    ),
    reference: Annotated[str, typer.Option(help="Router the prefill savings are measured against.")] = "round-robin",
    instances: Annotated[int, typer.Option(help="Instances.")] = 4,
    concurrency: Annotated[int, typer.Option(help="Workflows in flight (closed loop over root programs).")] = 32,
    gpu: Annotated[str, typer.Option(help="GPU catalog name.")] = "h100-sxm",
    model: Annotated[str, typer.Option(help="Model catalog name.")] = "llama-3.1-8b",
    seed: Annotated[int, typer.Option(help="Seed of the fan-out generator and the simulation.")] = 0,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for fanout.md, fanout.png, summary.json.")] = Path(
        "reports/fleet/fanout"
    ),
    as_json: Json = False,
) -> None:
    """Sub-agent fan-out: sibling prefix sharing by router, workflow JCT, eviction of others' prefixes.

    Adds sub-agents to the first PROGRAMS programs of the trace (agentreplay.fanout: each non-last turn spawns
    FANOUT children with probability FANOUT_PROB; the parent's next turn joins them), then simulates the fan-out
    trace and the roots alone under each router, and reports prefill tokens computed (and saved against the
    reference router), the sibling hit rate, workflow JCT p50 / p90, and the hit rate of programs without
    sub-agents with and without the others' bursts.

    Example: agentreplay fleet-fanout --fanout 4 --fanout-prob 0.05 --routers cache-aware,least-loaded,round-robin
    """
    from agentreplay.fanout import fan_out
    from agentreplay.fleet import fanout as ff
    from agentreplay.sim.config import ConfigError, SimConfig
    from agentreplay.sim.workload import compile_trace
    from agentreplay.trace.io import Trace, TraceError, read_trace

    names = [r.strip() for r in routers.split(",") if r.strip()]
    if share not in ("context", "system"):
        raise fail(f"--share: 'context' or 'system', got {share!r}")
    if programs < 1:
        raise fail(f"--programs: must be >= 1, got {programs}")
    try:
        src = read_trace(trace)
        keep = set(src.programs["program_id"].iloc[:programs])
        src = Trace(src.programs[src.programs["program_id"].isin(keep)], src.turns[src.turns["program_id"].isin(keep)])
        fan, stats = fan_out(
            src,
            fanout=fanout,
            prob=fanout_prob,
            share=share,  # type: ignore[arg-type]
            seed=seed,
            max_child_turns=max_child_turns,
            delay_s=spawn_delay,
        )
        w = compile_trace(fan)
        if w.dag is None:
            raise fail("no turn spawned: raise --fanout-prob or --programs")
        cfg = dataclasses.replace(
            SimConfig().replace(
                hardware={"instances": instances, "gpu": gpu, "model": model}, workload={"concurrency": concurrency}
            ),
            seed=seed,
        )
        with console.status("simulating") as status:
            rows = ff.compare_routers(w, cfg, names, reference, lambda n: status.update(f"simulating under {n}"))
    except (TraceError, ConfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    head, body = ff.rows_table(rows, reference)
    summary = {
        "trace": str(trace),
        "programs": programs,
        "fanout": fanout,
        "fanout_prob": fanout_prob,
        "share": share,
        "max_child_turns": max_child_turns,
        "spawn_delay_s": spawn_delay,
        "instances": instances,
        "concurrency": concurrency,
        "gpu": gpu,
        "model": model,
        "seed": seed,
        "generated": {
            "candidate_turns": stats.candidate_turns,
            "spawning_turns": stats.spawning_turns,
            "spawn_share": stats.spawn_share,
            "children": stats.children,
            "child_turns": stats.child_turns,
        },
        "rows": ff.as_json(rows),
    }
    out.mkdir(parents=True, exist_ok=True)
    title = (
        f"Fan-out: {programs} programs of {trace.name}, {stats.spawning_turns} spawning turns x {fanout} children "
        f"({stats.child_turns:,} child turns), {instances}x {gpu}, {model}"
    )
    notes = [
        f"Command: agentreplay fleet-fanout --programs {programs} --fanout {fanout} --fanout-prob {fanout_prob} "
        f"--share {share} --routers {','.join(names)} --instances {instances} --concurrency {concurrency}",
        "",
        "Definitions: agentreplay/fleet/fanout.py. Figure: fanout.png.",
    ]
    (out / "fanout.md").write_text(ff.markdown(title, head, body, notes))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    ff.plot(rows, out / "fanout.png")
    if as_json:
        print_json(summary)
        return
    show(table(title, head, body))
    console.print(f"wrote {out / 'fanout.md'}, {out / 'fanout.png'}, {out / 'summary.json'}")
