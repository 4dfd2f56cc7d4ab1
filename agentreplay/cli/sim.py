"""``simulate`` and ``catalog`` commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from agentreplay.cli.app import app, console, fail


def build_config(config: Path | None, overrides: dict[str, dict[str, Any]], preset: str | None = None) -> Any:
    """The TOML file (or defaults), then the preset, then the command-line options that were given."""
    from agentreplay.policy.presets import apply_preset
    from agentreplay.sim.config import ConfigError, SimConfig, load

    try:
        cfg = load(config) if config else SimConfig()
        if preset:
            cfg = apply_preset(cfg, preset)
        sections = {k: {f: v for f, v in fields.items() if v is not None} for k, fields in overrides.items()
                    if k != "seed"}
        cfg = cfg.replace(**{k: v for k, v in sections.items() if v})
        if overrides.get("seed") is not None:
            cfg = cfg.replace(seed=overrides["seed"])
    except (ConfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    return cfg


def common_overrides(gpu: str | None, model: str | None, dtype: str | None, tp: int | None, instances: int | None,
                     router: str | None, arrival: str | None, concurrency: int | None, rate: float | None,
                     max_programs: int | None, tools: str | None, tool_scale: float | None,
                     tool_fixed: float | None, tool_model: Path | None, num_gpu_blocks: int | None,
                     max_num_seqs: int | None, max_num_batched_tokens: int | None, queue: str | None,
                     victim: str | None, retention: str | None, ttl: float | None, dram_gib: float | None,
                     cxl_gib: float | None, inter_instance_gbps: float | None, decision_log: bool | None,
                     seed: int | None, groups: list[str] | None = None, perf: str | None = None,
                     mixed_attention: str | None = None, dp: int | None = None, ep: bool | None = None,
                     all2all_backend: str | None = None) -> dict[str, Any]:
    if tool_model is not None and tools is None:
        tools = "generative"
    if dp is not None and dp > 1 and router is None:
        router = "vllm-dp"  # vLLM's own front end balances its DP ranks
    return {
        "hardware": {"gpu": gpu, "model": model, "dtype": dtype, "tp": tp, "instances": instances,
                     "groups": tuple(groups) if groups else None, "perf": perf, "mixed_attention": mixed_attention,
                     "dp": dp, "ep": ep, "all2all_backend": all2all_backend},
        "router": {"policy": router, "inter_instance_gbps": inter_instance_gbps},
        "workload": {"arrival": arrival, "concurrency": concurrency, "rate_per_s": rate, "max_programs": max_programs},
        "tools": {"mode": tools, "scale": tool_scale, "fixed_s": tool_fixed,
                  "model_path": str(tool_model) if tool_model else None},
        "cache": {"num_gpu_blocks": num_gpu_blocks},
        "scheduler": {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens},
        "policy": {"queue": queue, "victim": victim, "retention": retention, "ttl_s": ttl,
                   "decision_log": decision_log},
        "tiers": {"dram_gib": dram_gib, "cxl_gib": cxl_gib},
        "seed": seed,
    }


def print_summary(s: dict[str, Any], title: str = "simulation summary") -> None:
    table = Table(title=title, show_header=False)
    c = s["cluster"]
    table.add_row("cluster", f"{c['instances']} x {c['model']} {c['dtype']} on {c['tp']}x {c['gpu']}, "
                             f"{c['num_gpu_blocks']:,} KV blocks/instance ({c['kv_blocks_from']}), "
                             f"max_num_seqs {c['max_num_seqs']}, max_num_batched_tokens {c['max_num_batched_tokens']}")
    if c.get("dp", 1) > 1:
        g = s.get("dp_group")
        table.add_row("data parallel", f"dp {c['dp']} x tp {c['tp']}, expert parallel {'on' if c['ep'] else 'off'}, "
                                       f"{c['all2all_backend'] if c['lockstep'] else 'independent ranks'}"
                      + (f"; {g['steps']:,} lockstep steps, {g['dummy_rank_steps']:,} dummy rank-steps, "
                         f"dispatch/combine {g['comm_s']:,.1f} of {g['busy_s']:,.1f} s busy" if g else ""))
    table.add_row("programs / turns", f"{s['programs']:,} / {s['turns']:,}")
    table.add_row("makespan", f"{s['makespan_s']:,.1f} s")
    for key, label in (("jct_s", "JCT"), ("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("queued_s", "queueing")):
        q = s[key]
        table.add_row(f"{label} mean / p50 / p90 / p99 (s)",
                      f"{q['mean']:.3f} / {q['p50']:.3f} / {q['p90']:.3f} / {q['p99']:.3f}")
    table.add_row("throughput", f"{s['throughput_programs_per_s']:.4f} programs/s, "
                                f"{s['throughput_output_tokens_per_s']:,.0f} output tokens/s")
    table.add_row("prefix hit rate", f"{s['prefix_hit_rate']:.3f} (shared prefix "
                                     f"{s['prefix_hit_rate_shared_prefix']:.3f}, own history "
                                     f"{s['prefix_hit_rate_own_history']:.3f})")
    table.add_row("preemptions / recomputed tokens", f"{s['preemptions']:,} / {s['recomputed_tokens']:,}")
    if "policy" in s:
        p = s["policy"]
        table.add_row("policies", f"router {p['router']}, queue {p['queue']}, victim {p['victim']}, "
                                  f"retention {p['retention']}")
        table.add_row("affinity breaks / KV bytes moved", f"{s['affinity_breaks']:,} / "
                                                          f"{s['bytes_moved_total'] / 1e9:,.1f} GB")
    console.print(table)


@app.command()
def simulate(
    trace: Annotated[Path, typer.Option("--trace", "-t", help="Canonical trace folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")],
    preset: Annotated[str | None, typer.Option(help="vllm | sglang | autellix | continuum | infercept | "
                                                    "lmcache-offload | agent-affinity")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU catalog name (see `agentreplay catalog`).")] = None,
    model: Annotated[str | None, typer.Option(help="Model catalog name.")] = None,
    dtype: Annotated[str | None, typer.Option(help="bf16 | fp8")] = None,
    perf: Annotated[str | None, typer.Option(help="Iteration pricer: roofline | refined | table.")] = None,
    mixed_attention: Annotated[str | None, typer.Option(help="one_kernel (default: a prefill + decode iteration's "
                                                             "attention as vLLM's one FlashAttention-2 kernel) | "
                                                             "apart.")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel degree.")] = None,
    instances: Annotated[int | None, typer.Option(help="Number of instances.")] = None,
    dp: Annotated[int | None, typer.Option("--dp", help="vLLM --data-parallel-size: DP ranks of one deployment "
                                                        "(router vllm-dp unless --router is given).")] = None,
    ep: Annotated[bool | None, typer.Option("--ep/--no-ep", help="vLLM --enable-expert-parallel (MoE, dp >= 2).")]
    = None,
    all2all_backend: Annotated[str | None, typer.Option(help="vLLM all2all_backend: allgather_reducescatter | "
                                                             "deepep_high_throughput | deepep_low_latency | "
                                                             "flashinfer_nvlink_two_sided")] = None,
    group: Annotated[list[str] | None, typer.Option(help="Heterogeneous cluster: GPU:TP:COUNT[:DTYPE], repeatable "
                                                         "(e.g. --group h100-sxm:1:2 --group a100-80gb:2:1).")]
    = None,
    router: Annotated[str | None, typer.Option(help="round-robin | least-loaded | session-affinity | cache-aware "
                                                    "| autellix | vllm-dp")] = None,
    arrival: Annotated[str | None, typer.Option(help="closed | poisson | trace")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Programs in flight (closed loop).")] = None,
    rate: Annotated[float | None, typer.Option(help="Programs per second (poisson).")] = None,
    max_programs: Annotated[int | None, typer.Option(help="Replay only the first N programs.")] = None,
    tools: Annotated[str | None, typer.Option(help="replay | fixed | scale | generative")] = None,
    tool_scale: Annotated[float | None, typer.Option(help="Multiplier for --tools scale / generative.")] = None,
    tool_fixed: Annotated[float | None, typer.Option(help="Seconds per gap for --tools fixed.")] = None,
    tool_model: Annotated[Path | None, typer.Option(help="Tool model JSON (fit-tools); implies generative.")] = None,
    num_gpu_blocks: Annotated[int | None, typer.Option(help="KV blocks per instance (overrides memory model).")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM max_num_seqs.")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(help="vLLM max_num_batched_tokens.")] = None,
    queue: Annotated[str | None, typer.Option(help="fcfs | program-fcfs | plas | continuum")] = None,
    victim: Annotated[str | None, typer.Option(help="most-recent | lowest-priority | age-aware")] = None,
    retention: Annotated[str | None, typer.Option(help="lru | evict | ttl | continuum | offload | infercept | "
                                                       "oracle")] = None,
    ttl: Annotated[float | None, typer.Option(help="Pin length for --retention ttl (s).")] = None,
    dram_gib: Annotated[float | None, typer.Option(help="Host DRAM tier per instance (GiB).")] = None,
    cxl_gib: Annotated[float | None, typer.Option(help="CXL tier per instance (GiB).")] = None,
    inter_instance_gbps: Annotated[float | None, typer.Option(help="KV transfer bandwidth between instances.")]
    = None,
    decision_log: Annotated[bool | None, typer.Option("--decision-log/--no-decision-log",
                                                      help="Write decisions.jsonl.")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML config; options override it.")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Replay a trace on a simulated cluster; write turns/programs/instances.parquet, summary.json, config.toml.

    Example: agentreplay simulate --trace datasets/swebench-verified --gpu h100-sxm --model llama-3.1-8b
    --concurrency 64 --out out/sim
    """
    from agentreplay.sim import CapacityError
    from agentreplay.sim import simulate as run_simulate
    from agentreplay.trace.io import TraceError, read_trace

    cfg = build_config(config, common_overrides(
        gpu, model, dtype, tp, instances, router, arrival, concurrency, rate, max_programs, tools, tool_scale,
        tool_fixed, tool_model, num_gpu_blocks, max_num_seqs, max_num_batched_tokens, queue, victim, retention, ttl,
        dram_gib, cxl_gib, inter_instance_gbps, decision_log, seed, group, perf, mixed_attention, dp, ep,
        all2all_backend), preset)
    try:
        tr = read_trace(trace)
    except TraceError as exc:
        raise fail(str(exc)) from None
    try:
        with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, disable=quiet, transient=True) as bar:
            task = bar.add_task("programs", total=tr.programs.shape[0])
            result = run_simulate(tr, cfg, progress=lambda done, total: bar.update(task, completed=done, total=total))
    except (CapacityError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    result.write(out)
    print_summary(result.summary)
    console.print(f"wrote {out}/turns.parquet, programs.parquet, instances.parquet, summary.json, config.toml")


@app.command()
def catalog() -> None:
    """List the GPUs and models the performance model knows, with their key numbers."""
    from agentreplay.perf import list_gpus, list_models, load_gpu, load_model

    gt = Table(title="GPUs")
    for col in ("name", "memory GiB", "HBM GB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "interconnect GB/s"):
        gt.add_column(col, justify="right")
    for name in list_gpus():
        g = load_gpu(name)
        gt.add_row(name, f"{g.memory_gib:g}", f"{g.mem_bandwidth_gbps:,.0f}", f"{g.bf16_tflops:g}",
                   f"{g.fp8_tflops:g}" if g.has_fp8 else "-", f"{g.interconnect} {g.interconnect_bw_gbps:g}")
    console.print(gt)
    mt = Table(title="models")
    for col in ("name", "params (B)", "layers", "hidden", "heads / kv", "experts (active)", "KV bytes/token bf16"):
        mt.add_column(col, justify="right")
    for name in list_models():
        m = load_model(name)
        experts = f"{m.num_experts} ({m.experts_per_token})" if m.is_moe else "-"
        mt.add_row(name, f"{m.param_count() / 1e9:.2f}", str(m.num_hidden_layers), str(m.hidden_size),
                   f"{m.num_attention_heads} / {m.num_key_value_heads}", experts, f"{m.kv_bytes_per_token('bf16'):,}")
    console.print(mt)
