"""The study's figures: compute first (:func:`spread`, :func:`gains`), draw second (helpers take an ``ax``).

Every line is the mean over seeds; the band around it is the seeds' range (min to max), so a reader sees whether
two lines differ by more than the seed-to-seed spread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentreplay.study.experiments import GRID_HARDWARE, GRID_POLICIES, Experiment


def spread(df: pd.DataFrame, metric: str, by: list[str]) -> pd.DataFrame:
    """Mean, min, max and count of ``metric`` over seeds, per ``by``."""
    g = df.groupby(by, sort=True, dropna=False)[metric]
    return g.agg(["mean", "min", "max", "count"]).reset_index()


def gains(df: pd.DataFrame, baseline: str, metric: str = "jct_mean_s", by: tuple[str, ...] = ("x",)) -> pd.DataFrame:
    """Per seed, ``metric`` of the ``baseline`` line / ``metric`` of each line (>1: the line is faster), then the
    mean, min and max over seeds per (``by``, line)."""
    keys = [*by, "seed"]
    base = df[df["group_name"] == baseline].set_index(keys)[metric].rename("base")
    d = df.join(base, on=keys)
    d["gain"] = d["base"] / d[metric]
    return spread(d, "gain", [*by, "group_name"])


def draw_lines(ax: Any, s: pd.DataFrame, label_of: str = "group_name") -> list[Any]:
    """One line per ``label_of`` value with its seed band; returns the line artists."""
    artists = []
    for name, g in s.groupby(label_of, sort=False):
        g = g.sort_values("x")
        (line,) = ax.plot(g["x"], g["mean"], marker="o", ms=3.5, label=str(name))
        if (g["count"] > 1).any():
            ax.fill_between(g["x"], g["min"], g["max"], color=line.get_color(), alpha=0.18, lw=0)
        artists.append(line)
    return artists


def _xaxis(ax: Any, exp: Experiment, values: np.ndarray) -> None:
    labels = {
        "workload_rate_per_s": "program arrival rate (programs/s)",
        "tools_scale": "tool-duration scale (x)",
        "workload_reuse_scale": "prefix reuse ratio eta",
    }
    ax.set_xlabel(labels.get(exp.x, exp.x))
    if exp.x == "tools_scale":
        ax.set_xscale("log")
        ax.set_xticks(sorted(values))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.grid(True, alpha=0.3)


def experiment_figure(
    df: pd.DataFrame, exp: Experiment, panels: list[tuple[str, str]], path: Path, baseline: str | None = None
) -> Path:
    """Panels of ``(metric, y label)`` against the experiment's x, one row per facet value. A metric named
    ``gain`` plots :func:`gains` over ``baseline``."""
    facets = sorted(df[exp.facet].unique()) if exp.facet else [None]
    fig, axes = plt.subplots(len(facets), len(panels), figsize=(4.6 * len(panels), 3.5 * len(facets)), squeeze=False)
    for i, fv in enumerate(facets):
        d = df if fv is None else df[df[exp.facet] == fv]
        for j, (metric, ylabel) in enumerate(panels):
            ax = axes[i][j]
            if metric == "gain":
                assert baseline is not None
                draw_lines(ax, gains(d, baseline))
                ax.axhline(1.0, color="grey", lw=0.8)
            else:
                draw_lines(ax, spread(d, metric, ["x", "group_name"]))
            _xaxis(ax, exp, d["x"].unique())
            ax.set_ylabel(ylabel)
            if fv is not None and exp.facet:
                ax.set_title(f"{exp.facet.replace('workload_', '').replace('_', ' ')} = {fv:g}", fontsize="small")
    axes[0][-1].legend(fontsize="x-small")
    seeds = df["seed"].nunique()
    fig.suptitle(f"{exp.title} ({seeds} seed{'s' if seeds > 1 else ''}; band = seed range)", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cell_labels(d: pd.DataFrame) -> pd.Series:
    """``h100-sxm 70b tp4`` per grid row."""
    cell = d["hardware_gpu"] + " " + d["hardware_model"].str.replace("llama-3.1-", "") + " tp"
    return cell + d["hardware_tp"].astype(int).astype(str)


def grid_heatmap(df: pd.DataFrame, path: Path, baseline: str = "vllm") -> tuple[Path, pd.DataFrame]:
    """The 80-cell grid: mean-JCT gain over ``baseline`` per (hardware x model, policy); returns the table too."""
    d = df[df["status"] == "ok"].copy()
    d["cell"] = cell_labels(d)
    piv = d.pivot_table(index="cell", columns="group_name", values="jct_mean_s", sort=False)
    rows = [f"{g} {m.replace('llama-3.1-', '')} tp{t}" for g, m, t, _ in GRID_HARDWARE]
    piv = piv.reindex(index=[r for r in rows if r in piv.index], columns=[c for c in GRID_POLICIES if c in piv.columns])
    gain = piv[[baseline]].to_numpy() / piv
    fig, ax = plt.subplots(figsize=(11, 4.6))
    im = ax.imshow(np.log2(gain.to_numpy(dtype=float)), cmap="RdBu", vmin=-1.5, vmax=1.5, aspect="auto")
    ax.set_xticks(range(gain.shape[1]), gain.columns, rotation=35, ha="right", fontsize="small")
    ax.set_yticks(range(gain.shape[0]), gain.index, fontsize="small")
    for (r, c), v in np.ndenumerate(gain.to_numpy(dtype=float)):
        ax.text(c, r, "-" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, label=f"log2(JCT {baseline} / JCT policy)")
    ax.set_title(f"80-cell grid: mean-JCT gain over {baseline} (>1 faster; 1 seed)", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, gain


def probe_figure(probe: pd.DataFrame, path: Path) -> Path:
    """The tool-scale mechanism: what Continuum's retention decided and how it fared, against tool scale."""
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 3.6))
    c = probe[probe.groupby("policy")["pin_share"].transform("max") > 0]  # the policies that pin
    for name, g in c.groupby("policy", sort=False):
        axes[0].plot(g["tool_scale"], g["pin_share"], marker="o", label=f"{name}: pinned")
        axes[0].plot(g["tool_scale"], g["pins_expired_share"], marker="x", ls="--", label=f"{name}: pin expired")
        axes[1].plot(g["tool_scale"], g["unpins_on_pressure"] / g["decisions"], marker="o", label=name)
    for name, g in probe.groupby("policy", sort=False):
        axes[2].plot(g["tool_scale"], g["prefix_hit_rate"], marker="o", label=name)
    titles = (
        "share of tool gaps pinned / pins that expired before the tool returned",
        "pins released under memory pressure, per gap",
        "prefix hit rate",
    )
    for ax, t in zip(axes, titles, strict=True):
        ax.set_xscale("log")
        ax.set_xticks(sorted(probe["tool_scale"].unique()))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("tool-duration scale (x)")
        ax.set_title(t, fontsize="small")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small")
    fig.suptitle(
        "Decision log: Continuum's retention vs tool scale (1 x H100, Llama-3.1-8B, 0.1 programs/s)", fontsize="medium"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
