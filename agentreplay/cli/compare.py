"""``compare``: several presets on one trace and configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agentreplay.cli.app import app, console, fail
from agentreplay.cli.sim import build_config, common_overrides


@app.command()
def compare(
    trace: Annotated[Path, typer.Option("--trace", "-t", help="Canonical trace folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")],
    presets: Annotated[str, typer.Option(help="Comma-separated preset names.")] =
    "vllm,sglang,autellix,continuum,infercept,lmcache-offload,agent-affinity",
    gpu: Annotated[str | None, typer.Option()] = None,
    model: Annotated[str | None, typer.Option()] = None,
    dtype: Annotated[str | None, typer.Option()] = None,
    tp: Annotated[int | None, typer.Option()] = None,
    instances: Annotated[int | None, typer.Option()] = None,
    arrival: Annotated[str | None, typer.Option()] = None,
    concurrency: Annotated[int | None, typer.Option()] = None,
    rate: Annotated[float | None, typer.Option()] = None,
    max_programs: Annotated[int | None, typer.Option()] = None,
    tools: Annotated[str | None, typer.Option()] = None,
    tool_scale: Annotated[float | None, typer.Option()] = None,
    tool_fixed: Annotated[float | None, typer.Option()] = None,
    tool_model: Annotated[Path | None, typer.Option()] = None,
    num_gpu_blocks: Annotated[int | None, typer.Option()] = None,
    max_num_seqs: Annotated[int | None, typer.Option()] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option()] = None,
    dram_gib: Annotated[float | None, typer.Option()] = None,
    cxl_gib: Annotated[float | None, typer.Option()] = None,
    inter_instance_gbps: Annotated[float | None, typer.Option()] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c")] = None,
) -> None:
    """Run presets on one trace and configuration; write compare.parquet, jct_cdf.png and each preset's results.

    Example: agentreplay compare --trace datasets/swebench-verified --instances 4 --concurrency 64
    --presets vllm,continuum --out out/cmp
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow as pa

    from agentreplay.compare import compare as run_compare
    from agentreplay.compare import plot_jct_cdf
    from agentreplay.sim import CapacityError
    from agentreplay.sim.workload import compile_trace
    from agentreplay.trace.io import TraceError, read_trace, write_tables

    names = [p.strip() for p in presets.split(",") if p.strip()]
    cfg = build_config(config, common_overrides(
        gpu, model, dtype, tp, instances, None, arrival, concurrency, rate, max_programs, tools, tool_scale,
        tool_fixed, tool_model, num_gpu_blocks, max_num_seqs, max_num_batched_tokens, None, None, None, None,
        dram_gib, cxl_gib, inter_instance_gbps, None, seed))
    try:
        workload = compile_trace(read_trace(trace))
        table, results = run_compare(
            workload, cfg, names, on_done=lambda n, r: console.print(f"[dim]{n}: done[/]"))
    except (TraceError, CapacityError, ValueError) as exc:
        raise fail(str(exc)) from None
    for name, res in results.items():
        res.write(out / name)
    write_tables(out, {"compare": pa.Table.from_pandas(table, preserve_index=False)})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_jct_cdf(ax, results)
    fig.tight_layout()
    fig.savefig(out / "jct_cdf.png", dpi=120)
    plt.close(fig)
    t = Table(title="preset comparison")
    for col in ("preset", "JCT mean", "p50", "p99", "programs/s", "hit rate", "preempt", "affinity breaks",
                "GB moved"):
        t.add_column(col, justify="right")
    for r in table.itertuples(index=False):
        t.add_row(r.preset, f"{r.jct_mean_s:,.1f}", f"{r.jct_p50_s:,.1f}", f"{r.jct_p99_s:,.1f}",
                  f"{r.throughput_programs_per_s:.4f}", f"{r.prefix_hit_rate:.3f}", f"{r.preemptions:,}",
                  f"{r.affinity_breaks:,}", f"{r.bytes_moved_total / 1e9:,.1f}")
    console.print(t)
    console.print(f"wrote {out}/compare.parquet, {out}/jct_cdf.png and one folder per preset")
