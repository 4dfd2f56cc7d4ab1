"""``tasks``: the task-level view of one simulate output (cost, goodput, TTFT by step, cache health).

:func:`analyse` computes everything as data (:class:`TaskReport`); :func:`write_report` writes its Parquet
tables, figures and a Markdown page into a folder. Nothing here runs the simulator: the inputs are a simulate
output folder (:mod:`agentreplay.fleet.outputs`), the run's performance model (for the uncontended JCT), a price
config (:mod:`agentreplay.fleet.cost`) and, optionally, the trace the run replayed (exact per-turn reuse and
turn counts).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agentreplay.fleet import cost as c
from agentreplay.fleet.cache_health import Collapse, collapsed_programs, collapses, health_by_step, turn_health
from agentreplay.fleet.goodput import deadlines, goodput, goodput_curve, ttft_by_step
from agentreplay.fleet.outputs import OutputError, SimOutput
from agentreplay.fleet.uncontended import uncontended

#: Deadline multiples and absolute deadlines reported besides the chosen one.
X_POINTS = (1.5, 2.0, 3.0, 5.0, 10.0)
D_POINTS = (300.0, 600.0, 1800.0, 3600.0, 7200.0)


@dataclass(frozen=True, slots=True)
class TaskReport:
    """Everything ``agentreplay tasks`` prints and writes. Frames are per program, per turn or per step bin."""

    summary: dict[str, Any]  #: headline figures (JSON-able)
    programs: pd.DataFrame  #: per program: JCT, uncontended JCT, deadline, met, costs, collapses
    turns: pd.DataFrame  #: per turn: hit / reload share, billing tokens per tier, uncontended service
    ttft_steps: pd.DataFrame
    health_steps: pd.DataFrame
    collapse_events: pd.DataFrame
    collapsed: pd.DataFrame
    goodput_x: pd.DataFrame  #: goodput vs deadline multiple
    goodput_abs: pd.DataFrame  #: goodput vs absolute deadline
    cost_share: pd.DataFrame  #: USD per 1,000 tasks per tier vs long-gap share
    notes: list[str] = field(default_factory=list)


def trace_columns(out: SimOutput, trace_turns: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(reused_tokens, cut)``: the trace's reuse per turn of the run (times the run's ``reuse_scale``, rounded
    down, as the simulator applies it) and, per program, whether the run has fewer turns than the trace."""
    key = trace_turns.set_index(["program_id", "turn_idx"])["reused_tokens"]
    idx = pd.MultiIndex.from_arrays([out.turns["program_id"].astype(str), out.turns["turn_idx"].astype(int)])
    got = key.reindex(idx)
    if got.isna().any():
        i = int(np.flatnonzero(got.isna().to_numpy())[0])
        raise OutputError(
            f"the trace has no turn {idx[i][1]} of program {idx[i][0]!r} that the run replayed; "
            "give the trace the run replayed (--trace)"
        )
    k = out.config.workload.reuse_scale
    reused = (got.to_numpy(np.int64) * k).astype(np.int64)
    n_trace = trace_turns.groupby("program_id").size().reindex(out.programs["program_id"]).to_numpy()
    cut = out.programs["n_turns"].to_numpy() < np.nan_to_num(n_trace, nan=0)
    return reused, cut


def analyse(
    out: SimOutput,
    prices: c.Prices,
    *,
    deadline_s: float | None = None,
    deadline_x: float | None = None,
    collapse: Collapse | None = None,
    trace_turns: pd.DataFrame | None = None,
    pricers: Any = None,
) -> TaskReport:
    """The task-level report of ``out`` (module docstring). Exactly one of ``deadline_s`` / ``deadline_x``;
    ``trace_turns``: the ``turns`` table of the trace the run replayed (optional); ``pricers``: override the
    run's pricers (:func:`agentreplay.fleet.uncontended.pricers_for`, tests)."""
    th = collapse or Collapse()
    turns, progs = out.turns, out.programs
    notes: list[str] = []
    reused = cut = None
    if trace_turns is not None:
        reused, cut = trace_columns(out, trace_turns)
    rej = out.summary.get("rejected", {}) or {}
    removed = int(rej.get("programs_removed", 0) or 0)
    if int(rej.get("programs_cut", 0) or 0) and cut is None:
        notes.append(
            f"{rej['programs_cut']} programs were cut at a call over max_model_len; without --trace they "
            "count as finished when their JCT meets the deadline"
        )

    # uncontended JCT and goodput
    un_turns, un_prog = uncontended(turns, out.config, reused, pricers)
    keep = ["program_id", "jct_s", "n_turns"] + (["gpu_s"] if "gpu_s" in progs.columns else [])
    p = progs[keep].merge(un_prog, on="program_id", how="left", validate="1:1")
    p["slowdown"] = p["jct_s"] / p["uncontended_jct_s"]
    p["deadline_s"] = deadlines(p, deadline_s=deadline_s, deadline_x=deadline_x)
    p["met"] = p["jct_s"] <= p["deadline_s"]
    if cut is not None:
        p["cut"] = cut
        p["met"] &= ~p["cut"]
    gp = goodput(p["jct_s"].to_numpy(), p["deadline_s"].to_numpy(), removed=removed, failed=cut)
    gx = goodput_curve(
        p["jct_s"].to_numpy(), p["uncontended_jct_s"].to_numpy(), np.linspace(1, 10, 91), removed=removed, failed=cut
    )
    jmax = float(np.nanmax(p["jct_s"])) if len(p) else 1.0
    gabs = goodput_curve(
        p["jct_s"].to_numpy(), np.ones(len(p)), np.linspace(0, jmax * 1.05, 200), removed=removed, failed=cut
    )

    # provider cost
    view = c.turn_cache_view(turns, reused)
    bill = c.bill_turns(view, prices)
    pc = c.program_costs(bill)
    be = c.break_even(view, prices)
    n = len(progs)
    rest = float(
        (bill["nocache_usd"] - view["input_tokens"] * prices.input_per_mtok / c.MTOK).sum()
        + bill["5m_fresh"].sum() * prices.input_per_mtok / c.MTOK
    )
    marks = [v for v in (be["break_even_share_s_star"], be["share_over_5m_tokens_s"]) if v == v]
    share = c.cost_vs_share(be, prices, n, rest, np.linspace(0, min(1.0, max(0.05, 4 * max(marks, default=0))), 101))
    per_k = {
        k: float(pc[col].sum()) * 1000.0 / n if n else float("nan")
        for k, col in (("nocache", "nocache_usd"), ("5m", "cost_5m_usd"), ("1h", "cost_1h_usd"))
    }

    # cache health
    health = turn_health(turns, reused, out.config.cache.block_size)
    events = collapses(health, th, out.decisions, out.failover)
    collapsed = collapsed_programs(events)

    p = p.merge(pc, on="program_id", how="left", validate="1:1")
    cnt = events.groupby("program_id").size() if len(events) else pd.Series(dtype=int)
    p["collapses"] = p["program_id"].map(cnt).fillna(0).astype(int)
    turn_frame = health.drop(columns=["first"]).merge(un_turns, on=["program_id", "turn_idx"], validate="1:1")
    turn_frame = turn_frame.merge(bill, on=["program_id", "turn_idx"], validate="1:1")
    turn_frame["cache_age_s"] = view["cache_age_s"].to_numpy()
    turn_frame["readable_tokens"] = view["readable_tokens"].to_numpy()

    cfg = out.config
    summary: dict[str, Any] = {
        "gpu_time": gpu_time(out, n),
        "gpu_s_per_program": gpu_per_program(progs),
        "output": str(out.path),
        "run": {
            "gpu": cfg.hardware.gpu,
            "model": cfg.hardware.model,
            "instances": len(cfg.hardware.instance_specs()),
            "arrival": cfg.workload.arrival,
            "concurrency": cfg.workload.concurrency,
            "policy": out.summary.get("policy"),
        },
        "programs": n,
        "turns": len(turns),
        "decision_log": out.has_decisions,
        "trace": trace_turns is not None,
        "goodput": {
            "deadline_s": deadline_s,
            "deadline_x": deadline_x,
            **gp,
            "programs_removed_by_admission": removed,
            "programs_cut": int(cut.sum()) if cut is not None else None,
            "jct_p50_s": float(np.median(p["jct_s"])) if n else None,
            "uncontended_jct_p50_s": float(np.median(p["uncontended_jct_s"])) if n else None,
            "slowdown_p50": float(np.median(p["slowdown"])) if n else None,
            "slowdown_p90": float(np.quantile(p["slowdown"], 0.9)) if n else None,
            "at_multiples": {
                str(x): goodput(p["jct_s"], x * p["uncontended_jct_s"], removed=removed, failed=cut)["goodput"]
                for x in X_POINTS
            },
            "at_seconds": {
                str(int(d)): goodput(p["jct_s"], np.full(n, d), removed=removed, failed=cut)["goodput"]
                for d in D_POINTS
            },
        },
        "cost": {
            "prices": dataclasses.asdict(prices),
            "usd_per_1000_tasks": per_k,
            "break_even": be,
            "programs_cheaper_with_1h": int((pc["cheaper_tier"] == "1h").sum()),
        },
        "cache_health": {
            "above": th.above,
            "below": th.below,
            "collapses": len(events),
            "programs_collapsed": len(collapsed),
            "by_cause": events["cause"].value_counts().to_dict() if len(events) else {},
            "turn_hit_share_mean": float(np.nanmean(health["hit_share"])) if len(health) else None,
            "turn_reuse_hit_mean": float(np.nanmean(health["reuse_hit"]))
            if health["reuse_hit"].notna().any()
            else None,
        },
        "notes": notes,
    }
    return TaskReport(
        summary,
        p,
        turn_frame,
        ttft_by_step(turns),
        health_by_step(health, th),
        events,
        collapsed,
        gx,
        gabs,
        share,
        notes,
    )


def gpu_per_program(progs: pd.DataFrame, top: int = 10) -> dict[str, Any]:
    """GPU-seconds per program (``programs.parquet`` ``gpu_s``: its token share of every iteration it ran in,
    :mod:`agentreplay.sim.gpu_time`): p50 / p90 / p99 / mean and the ``top`` programs. Empty for an output
    written before the column existed."""
    if "gpu_s" not in progs.columns or not len(progs):
        return {}
    g = progs["gpu_s"].to_numpy(float)
    order = np.argsort(-g, kind="stable")[:top]
    return {
        "p50": float(np.quantile(g, 0.5)),
        "p90": float(np.quantile(g, 0.9)),
        "p99": float(np.quantile(g, 0.99)),
        "mean": float(g.mean()),
        "top": [
            {
                "program_id": str(progs["program_id"].iloc[i]),
                "gpu_s": float(g[i]),
                "n_turns": int(progs["n_turns"].iloc[i]),
                "jct_s": float(progs["jct_s"].iloc[i]),
            }
            for i in order
        ],
    }


def gpu_time(out: SimOutput, n_programs: int) -> dict[str, Any]:
    """Self-hosted GPU time per 1,000 tasks: ``fleet`` = GPUs x makespan (idle time included), ``busy`` = each
    instance's busy seconds (``summary.json`` ``engine.busy_s_per_instance``) x its GPUs, ``attributed`` = the
    programs' GPU-seconds (their token shares of the iterations, ``programs.parquet`` ``gpu_s``; equal to
    ``busy`` by construction). ``idle`` = fleet - attributed: GPU time no program used (idle instances, the
    closed loop's tail)."""
    specs = out.config.hardware.instance_specs()
    gpus = sum(tp for _, tp, _ in specs)
    makespan = float(out.summary.get("makespan_s", float("nan")))
    busy = (out.summary.get("engine") or {}).get("busy_s_per_instance")
    busy_gpu_s = (
        float(sum(b * tp for b, (_, tp, _) in zip(busy, specs, strict=True)))
        if busy is not None and len(busy) == len(specs)
        else float("nan")
    )
    per_k = 1000.0 / 3600.0 / n_programs if n_programs else float("nan")
    attributed = float(out.programs["gpu_s"].sum()) if "gpu_s" in out.programs.columns else float("nan")
    return {
        "attributed_gpu_hours_per_1000_tasks": attributed * per_k,
        "idle_gpu_hours_per_1000_tasks": (gpus * makespan - attributed) * per_k,
        "gpus": gpus,
        "makespan_s": makespan,
        "fleet_gpu_hours_per_1000_tasks": gpus * makespan * per_k,
        "busy_gpu_hours_per_1000_tasks": busy_gpu_s * per_k,
        "busy_share": busy_gpu_s / (gpus * makespan) if gpus and makespan > 0 else float("nan"),
    }


def write_report(rep: TaskReport, folder: Path) -> list[Path]:
    """Write the report's tables (Parquet), figures (PNG), ``summary.json`` and ``tasks.md`` into ``folder``."""
    import json

    import pyarrow as pa

    from agentreplay.experiment.results import plain_json
    from agentreplay.fleet.figures import draw_all
    from agentreplay.fleet.markdown import render
    from agentreplay.trace.io import write_tables

    tables = {
        "programs": rep.programs,
        "turns": rep.turns,
        "ttft_by_step": rep.ttft_steps,
        "cache_by_step": rep.health_steps,
        "collapses": rep.collapse_events,
        "collapsed_programs": rep.collapsed,
        "goodput_curve": rep.goodput_x,
        "goodput_abs_curve": rep.goodput_abs,
        "cost_vs_share": rep.cost_share,
    }
    written = list(
        write_tables(folder, {k: pa.Table.from_pandas(v, preserve_index=False) for k, v in tables.items()}).values()
    )
    written += draw_all(rep, folder)
    (folder / "summary.json").write_text(json.dumps(plain_json(rep.summary), indent=2, sort_keys=True) + "\n")
    (folder / "tasks.md").write_text(render(rep))
    return [*written, folder / "summary.json", folder / "tasks.md"]
