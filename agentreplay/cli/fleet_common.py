"""Shared shell of the ``fleet-admission`` and ``fleet-priority`` commands: build the base configuration, run the
variants with progress, write table + summaries + figure, print (agentreplay.fleet.admission_study)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentreplay.cli.app import console, err, fail, print_json, show, table


def base_config(config: Path | None, overrides: dict[str, dict[str, Any]]) -> Any:
    from agentreplay.cli.sim import build_config

    return build_config(config, overrides)


def run_study(
    trace_dir: Path,
    base: Any,
    variants: dict[str, dict[str, dict[str, Any]]],
    build: Callable[[dict[str, dict[str, Any]]], Any],
    draw: Callable[..., Any],
    out: Path,
    kind: str,
    title: str,
    as_json: bool,
) -> None:
    """Run ``variants`` of ``base`` on the trace, write ``out`` (table.md, summary.json, figure.png), print."""
    from agentreplay.fleet.admission_study import markdown_table, run_variants, write_figure
    from agentreplay.outdir import OutputDirError, staged
    from agentreplay.sim import CapacityError
    from agentreplay.sim.config import ConfigError
    from agentreplay.trace.io import TraceError, read_trace

    try:
        trace = read_trace(trace_dir)
        progress = None if as_json else (lambda label: err.print(f"running {label} ...", markup=False))
        summaries = run_variants(trace, base, variants, progress)
        study = build(summaries)
        with staged(out, kind) as tmp:
            (tmp / "table.md").write_text(f"{title}\n\n" + markdown_table(study.head, study.rows))
            (tmp / "summary.json").write_text(json.dumps(_slim(summaries), indent=1, sort_keys=True, default=str))
            write_figure(tmp / f"{kind}.png", draw, study, title)
    except (TraceError, ConfigError, CapacityError, OutputDirError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json({"head": study.head, "rows": study.rows, "out": str(out)})
        return
    show(table(title, study.head, study.rows, left=2))
    console.print(f"wrote {out}: table.md, summary.json, {kind}.png", markup=False, soft_wrap=True)


def _slim(summaries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The summaries without the bulky per-instance and findings parts (the footprint series is kept)."""
    drop = {"cluster", "engine", "findings", "error_bands", "bytes_moved"}
    return {k: {f: v for f, v in s.items() if f not in drop} for k, s in summaries.items()}
