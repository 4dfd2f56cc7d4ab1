"""The validation report's figures: parity panels per metric group, signed-error heatmaps, CDF overlays.

Plot helpers take an ``ax`` and return artists (compute first, draw second); :func:`figures` writes the PNGs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from validation.components import profiles as C

COMPONENT_METRICS: Final = ("layer_time_s", "attention_prefill_s", "attention_decode_s", "lm_head_s", "all_reduce_s")
ITERATION_METRICS: Final = ("prefill_iteration_s", "decode_iteration_s")
_COLORS: Final = {
    "llmservingsim-v0": "tab:blue",
    "llmservingsim-perf": "tab:cyan",
    "vidur": "tab:green",
    "splitwise": "tab:olive",
    "vllm-run": "tab:red",
    "llmperf": "tab:purple",
    "agent-jct": "tab:orange",
}


#: Parity panels: one per metric group, so each panel's +-10% band is visible at its own scale.
PARITY_GROUPS: Final = (
    ("components (s)", lambda m: m.isin(COMPONENT_METRICS)),
    ("whole-model iterations (s)", lambda m: m.isin(ITERATION_METRICS)),
    ("end-to-end latency (s)", lambda m: m.str.match(r"(ttft|tpot|itl|e2e|jct|makespan)_")),
    ("throughput", lambda m: m.str.startswith("throughput")),
    ("counts (tokens, preemptions)", lambda m: m.isin(("cached_tokens", "preemptions"))),
)


def parity(ax: Any, df: pd.DataFrame, title: str = "parity") -> list[Any]:
    """Measured vs simulated, log-log, one colour per source; hollow markers = calibration points; dotted: +-10%."""
    arts = []
    d = df[(df["measured"] > 0) & (df["simulated"] > 0)]
    if not len(d):
        return arts
    for src, g in d.groupby("source"):
        for role, marker in (("calibration", "o"), ("validation", "^")):
            s = g[g["role"] == role]
            if len(s):
                face = "none" if role == "calibration" else _COLORS.get(src, "k")
                arts.append(
                    ax.scatter(
                        s["measured"],
                        s["simulated"],
                        s=10,
                        marker=marker,
                        facecolors=face,
                        edgecolors=_COLORS.get(src, "k"),
                        linewidths=0.6,
                        alpha=0.6,
                        label=f"{src} ({role})",
                    )
                )
    lo, hi = float(d[["measured", "simulated"]].min().min()), float(d[["measured", "simulated"]].max().max())
    xs = np.array([lo, hi])
    arts += ax.plot(xs, xs, "k-", lw=0.8) + ax.plot(xs, xs * 1.1, "k:", lw=0.6) + ax.plot(xs, xs / 1.1, "k:", lw=0.6)
    ax.set(xscale="log", yscale="log", xlabel="measured", ylabel="simulated", title=f"{title} (dotted: +-10%)")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=5, loc="upper left")
    return arts


#: Heatmap colour scale: symmetric log beyond +-10%, so +51% and +814% get different colours (to +-1000%).
HEAT_LINTHRESH: Final = 10.0
HEAT_VMAX: Final = 1000.0


def heatmap(ax: Any, table: pd.DataFrame, title: str, vmax: float = HEAT_VMAX) -> Any:
    """Signed error (%) per row x column, red = simulator too slow, blue = too fast, symmetric-log colour scale
    (linear within +-10%); each cell labelled with its value."""
    from matplotlib.colors import SymLogNorm

    norm = SymLogNorm(linthresh=HEAT_LINTHRESH, vmin=-vmax, vmax=vmax, base=10)
    im = ax.imshow(table.to_numpy(dtype=float), cmap="RdBu_r", norm=norm, aspect="auto")
    ax.set_xticks(range(table.shape[1]), table.columns, rotation=60, ha="right", fontsize=6)
    ax.set_yticks(range(table.shape[0]), table.index, fontsize=5)
    for (i, j), v in np.ndenumerate(table.to_numpy(dtype=float)):
        if np.isfinite(v):
            ax.text(
                j, i, f"{v:+.0f}", ha="center", va="center", fontsize=4.5, color="white" if abs(v) > 150 else "black"
            )
    ax.set_title(title, fontsize=8)
    return im


def cdf(ax: Any, measured: np.ndarray | None, simulated: np.ndarray, label: str) -> list[Any]:
    arts = []
    for vals, name, style in ((measured, "measured", "-"), (simulated, "simulated", "--")):
        if vals is None:
            continue
        v = np.sort(np.asarray(vals, dtype=float)[np.isfinite(vals)])
        arts += ax.plot(v, np.arange(1, len(v) + 1) / len(v), style, label=name)
    ax.set(xlabel=label, ylabel="CDF", title=label)
    ax.legend(fontsize=7)
    return arts


def _short(cid: str) -> str:
    return (
        cid.replace("llmservingsim-", "lss-")
        .replace("results_small_all_corrected", "small")
        .replace("results_homelab_single", "homelab")
        .replace("/swebench_llama70B_vllm", "")
    )


def figures(out: Path, df: pd.DataFrame, dists: dict[str, dict[str, Any]]) -> dict[str, str]:
    files: dict[str, str] = {}

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=130, bbox_inches="tight")  # long row labels are never cut off
        plt.close(fig)
        files[name] = name

    groups = [(t, df[f(df["metric"])]) for t, f in PARITY_GROUPS]
    groups = [(t, d) for t, d in groups if len(d)]
    if groups:
        ncols = min(3, len(groups))
        nrows = -(-len(groups) // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 4.2 * nrows), squeeze=False)
        for ax, (t, d) in zip(axes.flat, groups, strict=False):
            parity(ax, d, t)
        for ax in list(axes.flat)[len(groups) :]:
            ax.axis("off")
        save(fig, "parity.png")
    comp = df[df["metric"].isin(COMPONENT_METRICS + ITERATION_METRICS)]
    if len(comp):
        t = (
            comp.groupby([comp["cell_id"].map(_short) + " [" + comp["role"].str[:3] + "]", "metric"])["rel_error"]
            .mean()
            .unstack()
            * 100
        )
        fig, ax = plt.subplots(figsize=(6, max(3, 0.12 * len(t) + 1)))
        fig.colorbar(heatmap(ax, t, "component cells: signed mean error (%), symlog colour scale"), ax=ax, shrink=0.5)
        save(fig, "heatmap_components.png")
    e = df[~df["metric"].isin(COMPONENT_METRICS + ITERATION_METRICS)]
    if len(e):
        t = e.pivot_table(index=e["cell_id"].map(_short), columns="metric", values="rel_error") * 100
        t = t.loc[t.abs().max(axis=1).sort_values(ascending=False).index]  # worst cells on top
        fig, ax = plt.subplots(figsize=(max(6, 0.3 * t.shape[1] + 2), max(3, 0.18 * len(t) + 1.5)))
        fig.colorbar(heatmap(ax, t, "end-to-end cells: signed error (%), symlog colour scale"), ax=ax, shrink=0.5)
        save(fig, "heatmap_end_to_end.png")
    for cid, d in dists.items():
        if "measured" not in d:
            continue
        keys = [k for k in ("ttft_s", "tpot_s", "e2e_s", "jct_s") if k in d["simulated"]]
        fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False)
        for ax, k in zip(axes[0], keys, strict=True):
            cdf(ax, d["measured"].get(k), d["simulated"][k], k)
        fig.suptitle(_short(cid), fontsize=8)
        save(fig, f"cdf_{C.source_of(cid)}.png")
    return files
