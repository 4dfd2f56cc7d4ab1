"""``drive`` and ``drive-profile`` commands: replay a trace against / profile a live OpenAI-compatible engine.

Thin shells over :mod:`collectors.live` (imported lazily: agentreplay itself never imports collectors).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from agentreplay.cli.groups.drive import drive_app
from agentreplay.cli.output import console, err, fail, print_json, show


def _ints(text: str | None, name: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise fail(f"--{name} must be comma-separated integers, got {text!r}") from None


def _options(**kw: Any) -> Any:
    from collectors.live.endpoint import DriveOptions

    try:
        return DriveOptions(**{k: v for k, v in kw.items() if v is not None})
    except ValueError as exc:
        raise fail(str(exc)) from None


def _interrupted(exc: BaseException, out: Path) -> typer.Exit:
    written = getattr(exc, "partial_paths", None)
    where = f"finished turns written to {out} (partial: true)" if written else "nothing was written"
    err.print(f"[yellow]interrupted:[/] {where}")
    return typer.Exit(130)


@drive_app.command()
def drive(
    endpoint: Annotated[str, typer.Option(help="Server base URL, e.g. http://localhost:8000 (no /v1).")],
    trace: Annotated[Path, typer.Option("--trace", "-t", help="Canonical trace folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (measured schema + live_turns).")],
    arrival: Annotated[str, typer.Option(help="closed | poisson | trace")] = "closed",
    concurrency: Annotated[int, typer.Option(help="Programs in flight (closed loop).")] = 64,
    rate: Annotated[float, typer.Option(help="Programs per second (poisson).")] = 0.1,
    tools: Annotated[str, typer.Option(help="Tool gaps: replay | fixed | scale (as in simulate).")] = "replay",
    tool_scale: Annotated[float, typer.Option(help="Multiplier for --tools scale.")] = 1.0,
    tool_fixed: Annotated[float, typer.Option(help="Seconds per gap for --tools fixed.")] = 1.0,
    max_programs: Annotated[int | None, typer.Option(help="Drive only the first N programs. Default: all.")] = None,
    token_scale: Annotated[float, typer.Option(help="Scale every token count (small engines); output >= 1.")] = 1.0,
    model: Annotated[str | None, typer.Option(help="Served model name (default: first of /v1/models).")] = None,
    prompt_format: Annotated[str, typer.Option(help="auto | ids | text")] = "auto",
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds, streaming included.")] = 600.0,
    max_retries: Annotated[int, typer.Option(help="Retries per request (connection errors, 5xx).")] = 3,
    seed: Annotated[int, typer.Option(help="Seed for arrivals, tool model and prompt ids.")] = 0,
    gpu: Annotated[
        str | None, typer.Option(help="GPU name to record in the cell (e.g. 'H100 SXM'). Default: unrecorded.")
    ] = None,
    tp: Annotated[
        int | None, typer.Option(help="Tensor-parallel degree to record in the cell. Default: unrecorded.")
    ] = None,
    vocab_size: Annotated[int, typer.Option(help="Model vocabulary size; ids come from [1000, V-1000).")] = 32000,
    ignore_eos: Annotated[bool, typer.Option(help="Send ignore_eos (vLLM) to force output length.")] = True,
    min_tokens: Annotated[bool, typer.Option(help="Send min_tokens = max_tokens (vLLM).")] = True,
    return_token_ids: Annotated[bool, typer.Option(help="Ask for generated ids (vLLM return_token_ids).")] = True,
    metrics_interval: Annotated[float, typer.Option(help="Poll /metrics every S seconds (0: before/after).")] = 1.0,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run's metrics as JSON (no progress bar).")] = False,
) -> None:
    """Replay a trace's programs against a live completions endpoint; write the measured dataset.

    Example: agentreplay drive --endpoint http://localhost:8000 --trace datasets/swebench-verified
    --concurrency 16 --max-programs 50 --tools fixed --tool-fixed 2 --out out/live
    """
    from agentreplay.sim.config import ConfigError, ToolConfig, WorkloadConfig
    from agentreplay.trace.io import TraceError, read_trace
    from collectors.live.client import DriveError
    from collectors.live.driver import drive as run_drive

    try:
        cfg = WorkloadConfig(
            arrival=arrival,
            concurrency=concurrency,
            rate_per_s=rate,  # type: ignore[arg-type]
            max_programs=max_programs,
        )
        tool_cfg = ToolConfig(mode=tools, scale=tool_scale, fixed_s=tool_fixed)  # type: ignore[arg-type]
        tr = read_trace(trace)
    except (ConfigError, TraceError) as exc:
        raise fail(str(exc)) from None
    opts = _options(
        model=model,
        prompt_format=prompt_format,
        token_scale=token_scale,
        timeout_s=timeout,
        max_retries=max_retries,
        seed=seed,
        gpu=gpu,
        tp=tp,
        vocab_size=vocab_size,
        ignore_eos=ignore_eos,
        min_tokens=min_tokens,
        return_token_ids=return_token_ids,
        metrics_interval_s=metrics_interval,
        workload_label=trace.resolve().name,
    )
    n = min(len(tr.programs), max_programs or len(tr.programs))
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet or as_json,
        transient=True,
    ) as bar:
        task = bar.add_task("programs", total=n)
        try:
            res = run_drive(
                endpoint,
                tr,
                cfg,
                out,
                tools=tool_cfg,
                options=opts,
                progress=lambda done, total: bar.update(task, completed=done),
            )
        except KeyboardInterrupt as exc:
            raise _interrupted(exc, out) from None
        except (DriveError, ValueError) as exc:
            written = getattr(exc, "partial_paths", None)
            raise fail(f"{exc}" + (f"\n(finished turns written to {out}, partial: true)" if written else "")) from None
    m = dict(zip(res.tables["metrics"]["metric"], res.tables["metrics"]["value"], strict=True))
    if as_json:
        print_json(
            {
                "cell_id": res.tables["cells"]["cell_id"].iloc[0],
                "endpoint": res.info.endpoint,
                "model": res.info.model,
                "prompt_format": res.info.prompt_format,
                "turns": len(res.turns),
                "metrics": m,
                "notes": list(res.info.notes),
                "paths": {k: str(v) for k, v in res.paths.items()},
            }
        )
        return
    table = Table(title=f"live run: {res.tables['cells']['cell_id'].iloc[0]}", show_header=False)
    table.add_row("endpoint / model", f"{res.info.endpoint} / {res.info.model} ({res.info.prompt_format} prompts)")
    table.add_row("programs / turns", f"{int(m.get('completed_programs', 0)):,} / {len(res.turns):,}")
    for key, label in (("jct", "JCT"), ("ttft", "TTFT"), ("tpot", "TPOT")):
        if f"{key}_mean_s" in m:
            table.add_row(
                f"{label} mean / p50 / p95 (s)",
                f"{m[f'{key}_mean_s']:.3f} / {m[f'{key}_p50_s']:.3f} / {m[f'{key}_p95_s']:.3f}",
            )
    if "prefix_hit_rate" in m:
        table.add_row("prefix hit rate (engine)", f"{m['prefix_hit_rate']:.3f}")
    if "preemptions" in m:
        table.add_row("preemptions (engine)", f"{int(m['preemptions']):,}")
    table.add_row("retries", f"{int(m.get('retries_total', 0)):,}")
    show(table)
    for note in res.info.notes:
        console.print(f"[dim]note:[/] {escape(note)}")
    console.print(f"wrote {', '.join(str(p) for p in res.paths.values())}")


@drive_app.command("drive-profile")
def drive_profile(
    endpoint: Annotated[str, typer.Option(help="Server base URL, e.g. http://localhost:8000 (no /v1).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (measured cells + component).")],
    prefill_sizes: Annotated[
        str | None,
        typer.Option(help="Prompt sizes in tokens, comma-separated. Default: 16,128,512,1024,2048,4096,8192."),
    ] = None,
    batch_sizes: Annotated[
        str | None, typer.Option(help="Decode batch sizes, comma-separated. Default: 1,2,4,8,16,32,64.")
    ] = None,
    contexts: Annotated[
        str | None, typer.Option(help="Decode contexts in tokens, comma-separated. Default: 128,1024,4096.")
    ] = None,
    decode_tokens: Annotated[int | None, typer.Option(help="Output tokens per decode stream. Default: 64.")] = None,
    repeats: Annotated[int | None, typer.Option(help="Requests per prefill size (median). Default: 3.")] = None,
    model: Annotated[str | None, typer.Option(help="Served model name (default: first of /v1/models).")] = None,
    prompt_format: Annotated[str, typer.Option(help="auto | ids | text")] = "auto",
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds.")] = 600.0,
    gpu: Annotated[str | None, typer.Option(help="GPU name to record in the cell. Default: unrecorded.")] = None,
    tp: Annotated[
        int | None, typer.Option(help="Tensor-parallel degree to record in the cell. Default: unrecorded.")
    ] = None,
    vocab_size: Annotated[int, typer.Option(help="Model vocabulary size.")] = 32000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the measured iterations as JSON.")] = False,
) -> None:
    """Measure a live engine's prefill and decode iteration times into the measured ``component`` table.

    Example: agentreplay drive-profile --endpoint http://localhost:8000 --gpu "H100 SXM" --out out/profile
    """
    from collectors.live.client import DriveError
    from collectors.live.profile import ProfileOptions
    from collectors.live.profile import profile as run_profile

    given: dict[str, Any] = {
        "prefill_sizes": _ints(prefill_sizes, "prefill-sizes"),
        "batch_sizes": _ints(batch_sizes, "batch-sizes"),
        "contexts": _ints(contexts, "contexts"),
        "decode_tokens": decode_tokens,
        "repeats": repeats,
    }
    try:
        prof = ProfileOptions(**{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise fail(str(exc)) from None
    opts = _options(
        model=model,
        prompt_format=prompt_format,
        timeout_s=timeout,
        gpu=gpu,
        tp=tp,
        vocab_size=vocab_size,
        metrics_interval_s=0.0,
    )
    try:
        res = run_profile(endpoint, out, options=opts, profile=prof)
    except KeyboardInterrupt as exc:
        raise _interrupted(exc, out) from None
    except DriveError as exc:
        raise fail(str(exc)) from None
    comp = res.tables["component"]
    clocks = json.loads(res.tables["cells"]["config_json"].iloc[0]).get("decode_clock", {})
    if as_json:
        print_json(
            {
                "cell_id": res.tables["cells"]["cell_id"].iloc[0],
                "component": comp.to_dict(orient="records"),
                "decode_clock": clocks,
                "skipped": [str(x) for x in res.skipped],
                "paths": {k: str(v) for k, v in res.paths.items()},
            }
        )
        return
    table = Table(title=f"iteration profile: {res.tables['cells']['cell_id'].iloc[0]}")
    for col in ("op", "batch", "tokens", "context", "ms"):
        table.add_column(col, justify="right")
    for r in comp.itertuples(index=False):
        table.add_row(r.op, str(r.batch_size), str(r.num_tokens), str(r.context_tokens), f"{r.seconds * 1e3:.2f}")
    show(table)
    if clocks:
        label = {
            "engine": "the engine's clock",
            "window": "the driver's clock (common window)",
            "stream": "the driver's clock (whole streams)",
        }
        console.print(
            "decode steps timed on: " + ", ".join(f"{label.get(k, k)} x{n}" for k, n in sorted(clocks.items()))
        )
    if set(clocks) - {"engine"}:
        console.print(
            "[yellow]warning:[/] some decode steps were timed on the driver's clock (the server sent no per-request "
            "metrics; vLLM: --enable-per-request-metrics): an API server that delivers tokens in bursts makes them "
            "read too short"
        )
    for s in res.skipped:
        console.print(f"[dim]skipped:[/] {escape(str(s))}")
    console.print(f"wrote {', '.join(str(p) for p in res.paths.values())}")
