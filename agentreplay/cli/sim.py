"""``simulate`` and ``catalog`` commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from agentreplay.cli import options as o
from agentreplay.cli.config_build import build_config, common_overrides
from agentreplay.cli.groups.sim import sim_app
from agentreplay.cli.output import console, fail, print_json, show


def cluster_lines(s: dict[str, Any], plans: list[Any] | None = None) -> list[str]:
    """One line per group of identical instances (GPU, TP, dtype, KV blocks, batching limits)."""
    c = s["cluster"]
    per = c.get("per_instance") or [
        {"gpu": c["gpu"], "tp": c["tp"], "dtype": c["dtype"], "num_gpu_blocks": c["num_gpu_blocks"]}
    ] * int(c["instances"])
    groups: list[list[Any]] = []
    for i, inst in enumerate(per):
        seqs, tokens = (
            (plans[i].max_num_seqs, plans[i].max_num_batched_tokens)
            if plans
            else (c["max_num_seqs"], c["max_num_batched_tokens"])
        )
        key = (inst["gpu"], inst["tp"], inst["dtype"], inst["num_gpu_blocks"], seqs, tokens)
        if groups and groups[-1][0] == key:
            groups[-1][1] += 1
        else:
            groups.append([key, 1])
    return [
        f"{n} x {c['model']} {dtype} on {tp}x {gpu}, {blocks:,} KV blocks/instance ({c['kv_blocks_from']}), "
        f"max_num_seqs {seqs}, max_num_batched_tokens {tokens}"
        for (gpu, tp, dtype, blocks, seqs, tokens), n in groups
    ]


def print_summary(s: dict[str, Any], title: str = "simulation summary", plans: list[Any] | None = None) -> None:
    table = Table(title=title, show_header=False)
    table.add_column("figure", overflow="fold")
    table.add_column("value", overflow="fold")
    table.add_row("cluster", "\n".join(cluster_lines(s, plans)))
    c = s["cluster"]
    if c.get("dp", 1) > 1:
        g = s.get("dp_group")
        table.add_row(
            "data parallel",
            f"dp {c['dp']} x tp {c['tp']}, expert parallel {'on' if c['ep'] else 'off'}, "
            f"{c['all2all_backend'] if c['lockstep'] else 'independent ranks'}"
            + (
                f"; {g['steps']:,} lockstep steps, {g['dummy_rank_steps']:,} dummy rank-steps, "
                f"dispatch/combine {g['comm_s']:,.1f} of {g['busy_s']:,.1f} s busy"
                if g
                else ""
            ),
        )
    requests = s.get("unit") == "request"
    if requests:
        table.add_row("requests", f"{s['requests']:,} (a request-level trace: one request per program)")
    else:
        table.add_row("programs / turns", f"{s['programs']:,} / {s['turns']:,}")
    rej = s.get("rejected") or {}
    if rej.get("max_model_len") is not None:
        table.add_row(
            "max_model_len",
            f"{rej['max_model_len']:,}: {rej['rejected_requests']:,} request(s) rejected "
            f"(prompt >= max_model_len, {rej['rejected_prompt_tokens']:,} prompt tokens), "
            f"{rej['programs_removed']:,} program(s) removed, {rej['programs_cut']:,} cut "
            f"short ({rej['calls_not_run']:,} later calls not sent), "
            f"{rej['length_capped_requests']:,} output(s) capped",
        )
    table.add_row("makespan", f"{s['makespan_s']:,.1f} s")
    bands = s.get("error_bands", {})

    def band(key: str) -> str:
        return f" ({bands[key]['text']})" if key in bands else ""

    first = ("e2e_s", "E2E latency") if requests else ("jct_s", "JCT")
    for key, label in (first, ("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("queued_s", "queueing")):
        q = s[key]
        # a request's E2E latency is its one-turn program's JCT: the same band (agentreplay.bands.FAMILIES)
        table.add_row(
            f"{label} mean / p50 / p90 / p99 (s)",
            f"{q['mean']:.3f} / {q['p50']:.3f} / {q['p90']:.3f} / {q['p99']:.3f}"
            f"{band('jct_s' if key == 'e2e_s' else key)}",
        )
    if requests:
        table.add_row(
            "throughput",
            f"{s['throughput_requests_per_s']:.4f} requests/s, "
            f"{s['throughput_output_tokens_per_s']:,.0f} output tokens/s{band('throughput')}",
        )
    else:
        table.add_row(
            "throughput",
            f"{s['throughput_programs_per_s']:.4f} programs/s, "
            f"{s['throughput_output_tokens_per_s']:,.0f} output tokens/s{band('throughput')}",
        )
    if bands:
        cells = {b["cells"] for b in bands.values() if b.get("cells")}
        table.add_row(
            "error bands",
            "mean |error| of the validation cells comparable to this one (GPU and model "
            "class: agentreplay.bands), on the metric family each figure is judged by"
            + (": " + "; ".join(sorted(cells)) if cells else ""),
        )
    if requests:
        table.add_row(
            "prefix hit rate",
            f"{s['prefix_hit_rate']:.3f} (shared with earlier requests {s['prefix_hit_rate_shared_prefix']:.3f})",
        )
    else:
        table.add_row(
            "prefix hit rate",
            f"{s['prefix_hit_rate']:.3f} (shared prefix "
            f"{s['prefix_hit_rate_shared_prefix']:.3f}, own history "
            f"{s['prefix_hit_rate_own_history']:.3f})",
        )
    table.add_row("preemptions / recomputed tokens", f"{s['preemptions']:,} / {s['recomputed_tokens']:,}")
    if "policy" in s:
        p = s["policy"]
        adm = f", admission {s['admission']['policy']}" if "admission" in s else ""
        table.add_row(
            "policies",
            f"router {p['router']}, queue {p['queue']}, victim {p['victim']}, retention {p['retention']}{adm}",
        )
    if "admission" in s and "pauses" in s["admission"]:
        a = s["admission"]
        table.add_row(
            "admission pauses / held",
            f"{a['pauses']:,} pauses, {a['programs_held']:,} programs held (p50 {a['held_s_p50']:.1f} s, p90 "
            f"{a['held_s_p90']:.1f} s), {a['forced_resumes']:,} forced resumes",
        )
    if "policy" in s and not requests:
        table.add_row(
            "affinity breaks / KV bytes moved", f"{s['affinity_breaks']:,} / {s['bytes_moved_total'] / 1e9:,.1f} GB"
        )
    d = s.get("disagg")
    if d is not None:  # (agentreplay.features.disagg)
        table.add_row(
            "disaggregated prefill / decode",
            f"{d['prefill_instances']}P + {d['decode_instances']}D, session home {d['session_home']}; KV moved "
            f"{d['kv_bytes_transferred'] / 1e9:,.1f} GB P->D, pulled {d['kv_bytes_pulled'] / 1e9:,.1f} GB D->P; "
            f"transfer p50 / p99 {d['transfer_s']['p50']:.4f} / {d['transfer_s']['p99']:.4f} s; utilisation "
            f"prefill {d['utilisation']['prefill']:.0%}, decode {d['utilisation']['decode']:.0%}",
        )
    fo = s.get("failover")
    if fo is not None:  # (agentreplay.features.failover)
        kinds = [e["event"] for e in fo["events"]]
        table.add_row(
            "replica failures",
            f"failures / drains / recoveries {sum(k in ('fail', 'random') for k in kinds):,} / "
            f"{kinds.count('drain'):,} / {kinds.count('recover'):,}; {fo['affected_calls']:,} calls affected "
            f"({fo['aborted_calls']:,} aborted) in {fo['programs_affected']:,} programs, "
            f"{fo['reprefill_tokens']:,} tokens re-prefilled, {fo['held_calls']:,} calls held (failover.parquet)",
        )
    for f in s.get("findings", []):
        table.add_row(f"[bold yellow]{f['kind']}[/]", escape(f["message"]))
    show(table)


def note_pricer(summary: dict[str, Any], note: Any) -> None:
    """Which pricer ran, and why (:func:`agentreplay.perf.auto.resolve`), as the summary's ``pricer``: listed before
    the notes every run's summary ends with (``findings``, ``error_bands``: :mod:`agentreplay.sim.collect`)."""
    tail = {k: summary.pop(k) for k in ("findings", "error_bands") if k in summary}
    summary["pricer"] = note
    summary.update(tail)


@sim_app.command(epilog=o.config_sections())
def simulate(
    *,  # keyword-only, so the options are listed panel by panel (the panels come in the order of their first option)
    config: o.Config = None,
    trace: o.Trace,
    arrival: o.Arrival = None,
    concurrency: o.Concurrency = None,
    rate: o.Rate = None,
    max_programs: o.MaxPrograms = None,
    tools: o.Tools = None,
    tool_scale: o.ToolScale = None,
    tool_fixed: o.ToolFixed = None,
    tool_model: o.ToolModel = None,
    seed: o.Seed = None,
    gpu: o.Gpu = None,
    model: o.Model = None,
    dtype: o.Dtype = None,
    kv_cache_dtype: o.KvCacheDtype = None,
    tp: o.Tp = None,
    instances: o.Instances = None,
    dp: o.Dp = None,
    ep: o.Ep = None,
    all2all_backend: o.All2AllBackend = None,
    group: o.Group = None,
    perf: o.Perf = None,
    mixed_attention: o.MixedAttention = None,
    deployment_kernels: o.DeploymentKernels = None,
    engine_cost: o.EngineCost = None,
    enforce_eager: o.EnforceEager = None,
    preset: o.Preset = None,
    router: o.Router = None,
    queue: o.Queue = None,
    victim: o.Victim = None,
    retention: o.Retention = None,
    ttl: o.Ttl = None,
    admission: o.Admission = None,
    max_model_len: o.MaxModelLen = None,
    max_num_seqs: o.MaxNumSeqs = None,
    max_num_batched_tokens: o.MaxNumBatchedTokens = None,
    num_gpu_blocks: o.NumGpuBlocks = None,
    dram_gib: o.DramGib = None,
    cxl_gib: o.CxlGib = None,
    inter_instance_gbps: o.InterInstanceGbps = None,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output folder, replaced as a whole: turns / programs / "
            "instances.parquet, summary.json, config.toml (and decisions.jsonl).",
            rich_help_panel=o.OUTPUT,
        ),
    ],
    decision_log: o.DecisionLog = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.", rich_help_panel=o.OUTPUT)] = False,
    error_bands: Annotated[
        str,
        typer.Option(
            help="Error-band file (agentreplay validate writes error_bands.json) "
            "for the headline figures, or 'none'. Default: the packaged one, "
            "from the committed validation report.",
            rich_help_panel=o.OUTPUT,
        ),
    ] = "packaged",
    stream: Annotated[
        bool,
        typer.Option(
            help="Write the tables as programs finish, so memory holds live programs only (a day of a large "
            "fleet; the summary is the same, without the saturation findings).",
            rich_help_panel=o.OUTPUT,
        ),
    ] = False,
    as_json: o.OutputJson = False,
) -> None:
    """Replay a trace on a simulated cluster; write turns/programs/instances.parquet, summary.json, config.toml.

    The summary says when the run is saturated (queueing dominates TTFT) or
    prefix reuse collapsed, with the figures (agentreplay.sim.diagnose).

    Example: agentreplay simulate --trace datasets/swebench-verified
    --gpu h100-sxm --model llama-3.1-8b --concurrency 64 --out out/sim
    """
    from agentreplay.outdir import OutputDirError, staged
    from agentreplay.perf.auto import resolve as resolve_pricer
    from agentreplay.sim import CapacityError
    from agentreplay.sim import simulate as run_simulate
    from agentreplay.sim.run import plan_cluster
    from agentreplay.sim.workload import load_workload
    from agentreplay.trace.io import TraceError

    cfg = build_config(
        config,
        common_overrides(
            gpu=gpu,
            model=model,
            dtype=dtype,
            kv_cache_dtype=kv_cache_dtype,
            tp=tp,
            instances=instances,
            dp=dp,
            ep=ep,
            all2all_backend=all2all_backend,
            groups=group,
            perf=perf,
            mixed_attention=mixed_attention,
            deployment_kernels=deployment_kernels,
            engine_cost=engine_cost,
            enforce_eager=enforce_eager,
            arrival=arrival,
            concurrency=concurrency,
            rate=rate,
            max_programs=max_programs,
            tools=tools,
            tool_scale=tool_scale,
            tool_fixed=tool_fixed,
            tool_model=tool_model,
            seed=seed,
            router=router,
            queue=queue,
            victim=victim,
            retention=retention,
            ttl=ttl,
            admission=admission,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_gpu_blocks=num_gpu_blocks,
            dram_gib=dram_gib,
            cxl_gib=cxl_gib,
            inter_instance_gbps=inter_instance_gbps,
            decision_log=decision_log,
        ),
        preset,
    )
    try:
        tr = load_workload(trace)  # without pandas (agentreplay.trace.columns)
    except TraceError as exc:
        raise fail(str(exc)) from None
    try:
        with staged(out, "simulate") as tmp:
            stream_to = tmp if stream else None
            if quiet or as_json:
                result = run_simulate(tr, cfg, stream_to=stream_to, error_bands=error_bands)
            else:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

                with Progress(
                    "[progress.description]{task.description}",
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=console,
                    transient=True,
                ) as bar:
                    task = bar.add_task("programs", total=tr.n_programs)
                    result = run_simulate(
                        tr,
                        cfg,
                        progress=lambda done, total: bar.update(task, completed=done, total=total),
                        stream_to=stream_to,
                        error_bands=error_bands,
                    )
            note_pricer(result.summary, resolve_pricer(cfg, perf, config)[1])
            written = [path.name for path in result.write(tmp).values()]
    except (CapacityError, OutputDirError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(result.summary)
        return
    print_summary(result.summary, plans=plan_cluster(result.config))
    console.print(f"wrote {out}/{', '.join(written)}", markup=False, soft_wrap=True)


@sim_app.command()
def catalog(as_json: o.Json = False) -> None:
    """List the GPUs and models the performance model knows, with their key numbers.

    Example: agentreplay catalog --json
    """
    from agentreplay.perf.catalog import catalog_rows

    rows = catalog_rows()
    if as_json:
        print_json(rows)
        return
    gpus, models = rows["gpus"], rows["models"]
    gt = Table(title="GPUs")
    for col in ("name", "memory GiB", "HBM GB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "interconnect GB/s"):
        gt.add_column(col, justify="left" if col == "name" else "right")
    for g in gpus:
        gt.add_row(
            g["name"],
            f"{g['memory_gib']:g}",
            f"{g['hbm_gbps']:,.0f}",
            f"{g['bf16_tflops']:g}",
            "-" if g["fp8_tflops"] is None else f"{g['fp8_tflops']:g}",
            f"{g['interconnect']} {g['interconnect_gbps']:g}",
        )
    show(gt)
    mt = Table(title="models")
    for col in ("name", "params (B)", "layers", "hidden", "heads / kv", "experts (active)", "KV bytes/token bf16"):
        mt.add_column(col, justify="left" if col == "name" else "right")
    for m in models:
        experts = f"{m['experts']} ({m['experts_per_token']})" if m["experts"] else "-"
        mt.add_row(
            m["name"],
            f"{m['params_b']:.2f}",
            str(m["layers"]),
            str(m["hidden"]),
            f"{m['heads']} / {m['kv_heads']}",
            experts,
            f"{m['kv_bytes_per_token_bf16']:,}",
        )
    show(mt)
