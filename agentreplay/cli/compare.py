"""``compare``: several presets on one trace and configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentreplay.cli import options as o
from agentreplay.cli.app import app, console, err, fail, print_json, show
from agentreplay.cli.sim import build_config, common_overrides
from agentreplay.policy.presets import PRESETS


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

    Query the folder with the preset as a column:
    agentreplay query "select preset, avg(jct_s) from programs group by 1" --data out/cmp

    Example: agentreplay compare --trace datasets/swebench-verified --instances 4 --concurrency 64
    --presets vllm,continuum --out out/cmp
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow as pa

    from agentreplay.compare import compare as run_compare
    from agentreplay.compare import plot_jct_cdf
    from agentreplay.outdir import OutputDirError, staged
    from agentreplay.sim import CapacityError
    from agentreplay.sim.workload import compile_trace
    from agentreplay.trace.io import TraceError, read_trace, write_tables

    names = [p.strip() for p in presets.split(",") if p.strip()]
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
    try:
        with staged(out, "compare") as tmp:
            workload = compile_trace(read_trace(trace))
            table, results = run_compare(workload, cfg, names, on_done=lambda n, r: err.print(f"[dim]{n}: done[/]"))
            for name, res in results.items():
                res.write(tmp / name)
            write_tables(tmp, {"compare": pa.Table.from_pandas(table, preserve_index=False)})
            fig, ax = plt.subplots(figsize=(7, 4.5))
            plot_jct_cdf(ax, results)
            fig.tight_layout()
            fig.savefig(tmp / "jct_cdf.png", dpi=120)
            plt.close(fig)
    except (TraceError, CapacityError, OutputDirError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(table.to_dict(orient="records"))
        return
    t = Table(title="preset comparison")
    for col in (
        "preset",
        "JCT mean (s)",
        "p50 (s)",
        "p99 (s)",
        "programs/s",
        "hit rate",
        "preempt",
        "affinity breaks",
        "GB moved",
    ):
        t.add_column(col, justify="left" if col == "preset" else "right")
    for r in table.itertuples(index=False):
        t.add_row(
            r.preset,
            f"{r.jct_mean_s:,.1f}",
            f"{r.jct_p50_s:,.1f}",
            f"{r.jct_p99_s:,.1f}",
            f"{r.throughput_programs_per_s:.4f}",
            f"{r.prefix_hit_rate:.3f}",
            f"{r.preemptions:,}",
            f"{r.affinity_breaks:,}",
            f"{r.bytes_moved_total / 1e9:,.1f}",
        )
    show(t)
    console.print(
        f"wrote {out}/compare.parquet, {out}/jct_cdf.png and one folder per preset", markup=False, soft_wrap=True
    )
