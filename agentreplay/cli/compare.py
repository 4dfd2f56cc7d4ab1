"""``compare``: several presets on one trace and configuration (the experiment :mod:`agentreplay.experiment.compare`,
with every option of ``simulate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentreplay.cli import options as o
from agentreplay.cli.config_build import build_config, common_overrides
from agentreplay.cli.groups.sim import sim_app
from agentreplay.cli.output import fail, print_json
from agentreplay.policy.presets import PRESETS

#: agentreplay.experiment.compare.RANK_METRICS, spelled out so the help does not import the experiment (tests check
#: they agree)
RANK_METRICS = ("jct_mean", "jct_p50", "jct_p90", "jct_p99", "ttft_mean", "makespan")


@sim_app.command()
def compare(
    trace: o.Trace,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output folder: compare.parquet, jct_cdf.png, one simulate folder per preset and the finished runs in "
            "sim-runs/ (a rerun resumes; what a run with other options left is removed).",
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
    workers: Annotated[
        int | None, typer.Option(help="Worker processes; 1 runs every run in this process. Default: one per CPU.")
    ] = None,
    dask: Annotated[
        str | None,
        typer.Option(
            help="Run on a Dask distributed cluster, e.g. tcp://10.0.0.5:8786 (workers need agentreplay installed and "
            "the trace and output paths readable). Default: a local process pool."
        ),
    ] = None,
    as_json: o.Json = False,
) -> None:
    """Run presets on one trace and configuration; write compare.parquet, jct_cdf.png and each preset's results.

    Each preset runs once per seed (default three); the table shows the mean over the seeds and the ranking
    metric's spread, and names the best preset: presets whose metric differs by less than the seed spread (or
    1%) are a tie, broken by the simplest deployment (no extra memory tier, fewer mechanisms). Each preset's
    folder holds its first seed's results; every finished run is kept in OUT/sim-runs/, so rerunning the same
    command resumes (agentreplay.experiment.compare).

    Query the folder with the preset as a column:
    agentreplay query "select preset, avg(jct_s) from programs group by 1" --data out/cmp

    Example: agentreplay compare --trace datasets/swebench-verified --instances 4 --concurrency 64
    --presets vllm,continuum --out out/cmp
    """
    from agentreplay.cli.fleet_run import execute, parse_seeds, report
    from agentreplay.experiment.compare import EXPERIMENT, CompareParams

    try:
        p = CompareParams(presets=tuple(presets.split(",")), rank_by=rank_by)  # type: ignore[arg-type]
    except ValueError as exc:
        raise fail(str(exc)) from None
    seed_list = parse_seeds(seeds)
    cfg = build_config(
        config,
        common_overrides(
            gpu=gpu,
            model=model,
            dtype=dtype,
            tp=tp,
            instances=instances,
            groups=group,
            perf=perf,
            mixed_attention=mixed_attention,
            arrival=arrival,
            concurrency=concurrency,
            rate=rate,
            max_programs=max_programs,
            tools=tools,
            tool_scale=tool_scale,
            tool_fixed=tool_fixed,
            tool_model=tool_model,
            seed=seed,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_gpu_blocks=num_gpu_blocks,
            dram_gib=dram_gib,
            cxl_gib=cxl_gib,
            inter_instance_gbps=inter_instance_gbps,
        ),
    )
    outcome = execute(
        EXPERIMENT, p, cfg, trace, out, seeds=seed_list, workers=workers, dask=dask, quiet=as_json, title="compare"
    )
    if as_json:
        print_json(outcome.tables["compare"].to_dict(orient="records"))
        return
    report(EXPERIMENT, outcome, as_json=False)
