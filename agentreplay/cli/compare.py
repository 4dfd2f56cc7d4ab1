"""``compare``: several presets on one trace and configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from agentreplay.cli import options as o
from agentreplay.cli.app import app, console, err, fail, print_json, show
from agentreplay.cli.sim import build_config, common_overrides
from agentreplay.policy.presets import PRESETS

#: agentreplay.compare.RANK_METRICS, spelled out so the help does not import the simulator (tests check they agree)
RANK_METRICS = ("jct_mean", "jct_p50", "jct_p90", "jct_p99", "ttft_mean", "makespan")


@app.command()
def compare(
    trace: o.Trace,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output folder, replaced as a whole: compare.parquet, jct_cdf.png and one simulate folder per preset.",
        ),
    ],
    presets: Annotated[str, typer.Option(help=f"Comma-separated preset names, from: {', '.join(PRESETS)}.")] = ",".join(
        PRESETS
    ),
    seeds: Annotated[
        str | None,
        typer.Option(
            help="Seeds, comma-separated: every preset runs once per seed, the table shows means and the ranking "
            "metric's spread (max - min), and presets closer than that spread are a tie. Default: three seeds "
            "from --seed (or the config's seed): 0,1,2."
        ),
    ] = None,
    rank_by: Annotated[
        str,
        typer.Option(help=f"Metric the presets are ranked on (lower is better): {', '.join(RANK_METRICS)}."),
    ] = "jct_p90",
    gpu: o.Gpu = None,
    model: o.Model = None,
    dtype: o.Dtype = None,
    perf: o.Perf = None,
    mixed_attention: o.MixedAttention = None,
    tp: o.Tp = None,
    instances: o.Instances = None,
    group: o.Group = None,
    arrival: o.Arrival = None,
    concurrency: o.Concurrency = None,
    rate: o.Rate = None,
    max_programs: o.MaxPrograms = None,
    max_model_len: o.MaxModelLen = None,
    tools: o.Tools = None,
    tool_scale: o.ToolScale = None,
    tool_fixed: o.ToolFixed = None,
    tool_model: o.ToolModel = None,
    num_gpu_blocks: o.NumGpuBlocks = None,
    max_num_seqs: o.MaxNumSeqs = None,
    max_num_batched_tokens: o.MaxNumBatchedTokens = None,
    dram_gib: o.DramGib = None,
    cxl_gib: o.CxlGib = None,
    inter_instance_gbps: o.InterInstanceGbps = None,
    seed: o.Seed = None,
    config: o.Config = None,
    as_json: o.Json = False,
) -> None:
    """Run presets on one trace and configuration; write compare.parquet, jct_cdf.png and each preset's results.

    Each preset runs once per seed (default three); the table shows the mean over the seeds and the ranking
    metric's spread, and names the best preset: presets whose metric differs by less than the seed spread (or
    1%) are a tie, broken by the simplest deployment (no extra memory tier, fewer mechanisms). Each preset's
    folder holds its first seed's results.

    Query the folder with the preset as a column:
    agentreplay query "select preset, avg(jct_s) from programs group by 1" --data out/cmp

    Example: agentreplay compare --trace datasets/swebench-verified --instances 4 --concurrency 64
    --presets vllm,continuum --out out/cmp
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow as pa

    from agentreplay.compare import check_presets, plot_jct_cdf, rank
    from agentreplay.compare import compare as run_compare
    from agentreplay.outdir import OutputDirError, staged
    from agentreplay.sim import CapacityError
    from agentreplay.sim.workload import compile_trace
    from agentreplay.trace.io import TraceError, read_trace, write_tables

    try:
        names = check_presets(presets.split(","))
    except ValueError as exc:
        raise fail(str(exc)) from None
    if rank_by not in RANK_METRICS:
        raise fail(f"--rank-by {rank_by!r}: one of {', '.join(RANK_METRICS)}")
    seed_list = _seeds(seeds)
    cfg = build_config(
        config,
        common_overrides(
            gpu,
            model,
            dtype,
            tp,
            instances,
            None,
            arrival,
            concurrency,
            rate,
            max_programs,
            tools,
            tool_scale,
            tool_fixed,
            tool_model,
            num_gpu_blocks,
            max_num_seqs,
            max_num_batched_tokens,
            None,
            None,
            None,
            None,
            dram_gib,
            cxl_gib,
            inter_instance_gbps,
            None,
            seed,
            group,
            perf,
            mixed_attention,
            max_model_len=max_model_len,
        ),
    )
    if seed_list is None:
        seed_list = [cfg.seed, cfg.seed + 1, cfg.seed + 2]
    try:
        with staged(out, "compare") as tmp:
            workload = compile_trace(read_trace(trace))
            table, results = run_compare(
                workload, cfg, names, on_done=lambda n, r: err.print(f"[dim]{n}: done[/]"), seeds=seed_list
            )
            ranking = rank(table, cfg, rank_by)
            for name, res in results.items():
                res.write(tmp / name)
            stored = _stored(table, ranking)
            write_tables(tmp, {"compare": pa.Table.from_pandas(stored, preserve_index=False)})
            fig, ax = plt.subplots(figsize=(7, 4.5))
            plot_jct_cdf(ax, results)
            fig.tight_layout()
            fig.savefig(tmp / "jct_cdf.png", dpi=120)
            plt.close(fig)
    except KeyboardInterrupt:
        err.print(f"interrupted: {out} left as it was (compare is not resumable: rerun it)", markup=False)
        raise typer.Exit(130) from None
    except (TraceError, CapacityError, OutputDirError, ValueError) as exc:
        raise fail(str(exc)) from None
    table = stored
    if as_json:
        print_json(table.to_dict(orient="records"))
        return
    m = ranking.metric
    t = Table(title=f"preset comparison (mean over seeds {','.join(map(str, seed_list))}; ranked on {m})")
    for col in (
        "preset",
        "JCT mean (s)",
        "p50 (s)",
        "p90 (s)",
        "p99 (s)",
        f"{m} worst (s)",
        f"{m} spread (s)",
        "programs/s",
        "hit rate",
        "preempt",
        "affinity breaks",
        "GB moved",
        "deploys",
    ):
        t.add_column(col, justify="left" if col in ("preset", "deploys") else "right")
    for r in table.itertuples(index=False):
        mark = " <- best" if r.preset == ranking.best else (" (tie)" if r.preset in ranking.tied else "")
        t.add_row(
            r.preset + mark,
            f"{r.jct_mean_s:,.1f}",
            f"{r.jct_p50_s:,.1f}",
            f"{r.jct_p90_s:,.1f}",
            f"{r.jct_p99_s:,.1f}",
            f"{max(ranking.values[r.preset]):,.1f}",
            f"{ranking.spread[r.preset]:,.1f}",
            f"{r.throughput_programs_per_s:.4f}",
            f"{r.prefix_hit_rate:.3f}",
            f"{r.preemptions:,.0f}",
            f"{r.affinity_breaks:,.0f}",
            f"{r.bytes_moved_total / 1e9:,.1f}",
            ranking.deployment[r.preset],
        )
    show(t)
    console.print(f"best on {m}: {ranking.best}; {ranking.rule}", markup=False, soft_wrap=True)
    if ranking.tied:
        console.print(f"tied: {', '.join(ranking.tied)}", markup=False, soft_wrap=True)
    if len(seed_list) == 1:
        console.print("one seed: no spread measured, so only differences under 1% are ties", markup=False)
    console.print(
        f"wrote {out}/compare.parquet, {out}/jct_cdf.png and one folder per preset", markup=False, soft_wrap=True
    )


def _seeds(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        out = list(dict.fromkeys(int(v) for v in value.split(",") if v.strip()))
    except ValueError:
        raise fail(f"--seeds {value!r}: expected comma-separated non-negative integers, e.g. 0,1,2") from None
    if not out or any(v < 0 for v in out):
        raise fail(f"--seeds {value!r}: expected comma-separated non-negative integers, e.g. 0,1,2")
    return out


def _stored(table: Any, ranking: Any) -> Any:
    """compare.parquet: the table without the per-seed records, with the ranking metric per seed, its spread
    and the ranking (best, tie)."""
    out = table.drop(columns=["per_seed"])
    m = ranking.metric
    out[f"{m}_per_seed_s"] = [ranking.values[p] for p in out["preset"]]
    out[f"{m}_spread_s"] = [ranking.spread[p] for p in out["preset"]]
    out["rank_metric"] = m
    out["best"] = out["preset"] == ranking.best
    out["tie"] = out["preset"].isin(ranking.tied)
    out["deploys"] = [ranking.deployment[p] for p in out["preset"]]
    return out
