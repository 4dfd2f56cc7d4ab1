"""Figures of the task report. Each ``plot_*`` draws on an ``ax`` it is given and returns it; :func:`draw_all`
makes the files. Compute first (:mod:`agentreplay.fleet.report`), draw second."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from agentreplay.fleet.report import TaskReport


def subplots(*args: Any, figsize: tuple[float, float] | None = None, **kw: Any) -> tuple[Any, Any]:
    """``pyplot.subplots`` without pyplot: a figure of its own, so drawing switches no global backend and leaves
    nothing in pyplot's figure registry (``matplotlib.use("Agg")`` in a library would change the caller's
    backend); ``fig.savefig`` renders it with Agg. Same arguments as ``Figure.subplots``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*args, **kw)


def save(fig: Any, path: Path) -> Path:
    """``fig`` laid out and written to ``path`` at the reports' resolution (110 dpi); returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_ttft_by_step(ax: Any, rep: TaskReport) -> Any:
    t = rep.ttft_steps
    x = np.arange(len(t))
    ax.plot(x, t["ttft_p50_s"], "o-", label="p50")
    ax.plot(x, t["ttft_p99_s"], "s-", label="p99")
    ax.set_xticks(x, t["step"], rotation=45)
    ax.set_xlabel("step (turn number; binned beyond 10)")
    ax.set_ylabel("TTFT (s)")
    if (t["ttft_p50_s"] > 0).all() and t["ttft_p99_s"].max() / max(t["ttft_p50_s"].min(), 1e-9) > 50:
        ax.set_yscale("log")
    ax.set_title("TTFT by step")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def plot_goodput(ax_x: Any, ax_abs: Any, rep: TaskReport) -> tuple[Any, Any]:
    g = rep.goodput_x
    ax_x.plot(g["x"], g["goodput"])
    ax_x.set_xlabel("deadline (multiple of uncontended JCT)")
    ax_x.set_ylabel("goodput (met / attempted)")
    ax_x.set_ylim(0, 1.02)
    ax_x.grid(alpha=0.3)
    ax_x.set_title("goodput vs relative deadline")
    a = rep.goodput_abs
    ax_abs.plot(a["x"] / 60.0, a["goodput"])
    ax_abs.set_xlabel("deadline (minutes of JCT)")
    ax_abs.set_ylim(0, 1.02)
    ax_abs.grid(alpha=0.3)
    ax_abs.set_title("goodput vs absolute deadline")
    return ax_x, ax_abs


def plot_cost_break_even(ax: Any, rep: TaskReport) -> Any:
    s = rep.cost_share
    be = rep.summary["cost"]["break_even"]
    ax.plot(s["share_over_5m"], s["usd_per_1000_5m"], label="5-minute TTL")
    ax.plot(s["share_over_5m"], s["usd_per_1000_1h"], label="1-hour TTL")
    star, obs = be["break_even_share_s_star"], be["share_over_5m_tokens_s"]
    if star == star and 0 <= star <= 1:
        ax.axvline(star, color="grey", ls="--", label=f"break-even s* = {star:.4f}")
    if obs == obs:
        ax.axvline(obs, color="red", ls=":", label=f"this run s = {obs:.4f}")
    ax.set_xlabel("share of readable prefix tokens behind a gap > 5 min (s)")
    ax.set_ylabel("USD per 1,000 tasks")
    ax.set_title(f"provider cost by cache TTL ({rep.summary['cost']['prices']['name']})")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def plot_cache_health(ax: Any, rep: TaskReport) -> Any:
    h = rep.health_steps
    x = np.arange(len(h))
    ax.fill_between(x, h["reuse_hit_p10"], h["reuse_hit_p90"], alpha=0.2, label="reuse-hit p10-p90")
    ax.plot(x, h["reuse_hit_mean"], "o-", label="reuse-hit mean")
    ax.plot(x, h["reuse_hit_p50"], "s--", label="reuse-hit p50")
    ax.plot(x, h["hit_share_mean"], "^:", label="hit share of prompt, mean")
    ax.set_xticks(x, h["step"], rotation=45)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("step (turn number; binned beyond 10)")
    ax.set_ylabel("share (HBM prefix hits)")
    ax.set_title("per-session prefix hit share by step")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def plot_collapse_causes(ax: Any, rep: TaskReport) -> Any:
    by = rep.summary["cache_health"]["by_cause"]
    names = list(by)
    ax.barh(np.arange(len(names)), [by[k] for k in names])
    ax.set_yticks(np.arange(len(names)), names)
    ax.set_xlabel("collapses")
    th = rep.summary["cache_health"]
    ax.set_title(
        f"collapses (reuse-hit >= {th['above']}, then < {th['below']})\n"
        f"{th['collapses']:,} in {th['programs_collapsed']:,} programs, by cause"
    )
    if not names:
        ax.text(0.5, 0.5, "no collapse", ha="center", va="center", transform=ax.transAxes)
    return ax


def draw_all(rep: TaskReport, folder: Path) -> list[Path]:
    """Write ttft_by_step.png, goodput.png, cost_ttl.png and cache_health.png into ``folder``."""

    paths = []

    def save_as(fig: Any, name: str) -> None:
        paths.append(save(fig, folder / name))

    fig, ax = subplots(figsize=(7, 4.2))
    plot_ttft_by_step(ax, rep)
    save_as(fig, "ttft_by_step.png")
    fig, (a1, a2) = subplots(1, 2, figsize=(10, 4), sharey=True)
    plot_goodput(a1, a2, rep)
    save_as(fig, "goodput.png")
    fig, ax = subplots(figsize=(7, 4.2))
    plot_cost_break_even(ax, rep)
    save_as(fig, "cost_ttl.png")
    fig, (a1, a2) = subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    plot_cache_health(a1, rep)
    plot_collapse_causes(a2, rep)
    save_as(fig, "cache_health.png")
    return paths
