"""The plan's figure: cost against each objective metric for every configuration tried, the objective's line and
the chosen configuration marked. Compute first (:mod:`agentreplay.plan.report`), draw second; built with
``matplotlib.figure.Figure`` (no pyplot, no global state).

Every point sits at its configuration's true cost (USD per 1,000 tasks with prices, else GPU-hours per 1,000
tasks); configurations of equal cost and figure overlap, told apart by marker (preset) and size (TP)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

_MARKERS = "osD^vP*Xhp<>"


def x_of(data: dict[str, Any]) -> tuple[str, str]:
    """The cost column the x axis shows and its label."""
    if data.get("prices"):
        return "usd_per_1000_tasks", "USD per 1,000 tasks (steady state)"
    tiers = any(
        r.get("dram_gib_hours_per_1000_tasks") or r.get("cxl_gib_hours_per_1000_tasks") for r in data["configurations"]
    )
    note = "; host-memory tiers not on this axis (see the table)" if tiers else ""
    return "gpu_hours_per_1000_tasks", f"GPU-hours per 1,000 tasks (steady state{note})"


def plot_term(ax: Any, data: dict[str, Any], slo_text: str) -> Any:
    """One panel: x = cost per 1,000 tasks (:func:`x_of`, unshifted), y = the term's metric; colour = GPU,
    marker = preset, larger = higher TP; filled = meets the whole objective, hollow = misses it."""
    metric, op, bound = _split(slo_text)
    xcol, xlabel = x_of(data)
    rows = [r for r in data["configurations"] if r[metric] is not None and math.isfinite(r[metric])]
    gpus = sorted({r["gpu"] for r in data["configurations"]})
    presets = sorted({r["preset"] for r in data["configurations"]})
    colours = {g: f"C{i % 10}" for i, g in enumerate(gpus)}
    for r in rows:
        m = _MARKERS[presets.index(r["preset"]) % len(_MARKERS)]
        c = colours[r["gpu"]]
        ax.scatter(
            [r[xcol]],
            [r[metric]],
            marker=m,
            s=24 + 14 * r["tp"],
            facecolors=c if r["feasible"] else "none",
            edgecolors=c,
            linewidths=1.2,
            alpha=0.85,
        )
    for g in gpus:  # legend proxies: colour = GPU, marker = preset
        ax.scatter([], [], marker="s", color=colours[g], label=g)
    for i, p in enumerate(presets):
        ax.scatter([], [], marker=_MARKERS[i % len(_MARKERS)], facecolors="none", edgecolors="0.3", label=p)
    ax.axhline(bound, color="k", ls="--", lw=1, label=f"objective {slo_text}")
    chosen = data["chosen"]
    if chosen is not None and chosen[metric] is not None:
        ax.scatter(
            [chosen[xcol]],
            [chosen[metric]],
            marker="*",
            s=320,
            facecolors="none",
            edgecolors="red",
            linewidths=1.8,
            label="chosen",
            zorder=5,
        )
        xs = [r[xcol] for r in rows] or [chosen[xcol]]
        right_half = chosen[xcol] > (min(xs) + max(xs)) / 2
        ax.annotate(  # the label reads away from the nearer side of the panel, so it is never cut
            chosen["label"],
            (chosen[xcol], chosen[metric]),
            xytext=(-10 if right_half else 10, -14),
            textcoords="offset points",
            ha="right" if right_half else "left",
            fontsize=8,
            color="red",
        )
    ys = [r[metric] for r in rows if r[metric] > 0] + [bound]
    if op == "<=" and ys and max(ys) / min(ys) > 20:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric + (" (s)" if op == "<=" else " (share of programs)"))
    ax.set_title(f"{metric}: {op} {bound:g}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return ax


def _split(slo_text: str) -> tuple[str, str, float]:
    op = "<=" if "<=" in slo_text else ">="
    metric, value = slo_text.split(op)
    return metric, op, float(value.rstrip("s"))


def draw(data: dict[str, Any], path: Path) -> Path:
    """Write the figure (one panel per objective term) to ``path``."""
    terms = data["slo"]
    fig = Figure(figsize=(8.5 * len(terms), 5.2))
    axes = fig.subplots(1, len(terms), squeeze=False)[0]
    for ax, term in zip(axes, terms, strict=True):
        plot_term(ax, data, term)
    fig.suptitle(
        f"cost vs objective at {data['load_programs_per_s']:g} programs/s "
        f"({data['configurations_tried']} configurations)\nfilled = meets the objective, hollow = misses; "
        "larger marker = higher TP; points at their true cost (equal ones overlap)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
