"""Plot helpers for sweep reports: each takes an ``ax`` and data computed beforehand, and returns its artists.

Figures are built with ``matplotlib.figure.Figure`` directly (no pyplot, no global state, no display backend).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import Any

from matplotlib.figure import Figure


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    x: list[float]
    y: list[float]
    dashed: bool = False
    colour: int = 0  #: index into the colour cycle (a mean and a p99 line of one group share it)


@dataclass(frozen=True, slots=True)
class LineData:
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    logx: bool = False
    zero_line: bool = False  #: draw y = 0 (gains)


@dataclass(frozen=True, slots=True)
class BarData:
    title: str
    xlabel: str
    ylabel: str
    categories: list[str]
    stacks: list[tuple[str, list[float]]] = field(default_factory=list)  #: (name, one value per category)
    ymax: float | None = None  #: fixed upper y limit (fractions: room above 1 for the legend)


def line_plot(ax: Any, data: LineData) -> list[Any]:
    """One line per series, markers at the cells."""
    artists: list[Any] = []
    for s in data.series:
        (line,) = ax.plot(
            s.x, s.y, marker="o", linestyle="--" if s.dashed else "-", color=f"C{s.colour % 10}", label=s.name
        )
        artists.append(line)
    if data.zero_line:
        artists.append(ax.axhline(0.0, color="0.5", linewidth=0.8))
    if data.logx:
        ax.set_xscale("log", base=2)
        ticks = sorted({x for s in data.series for x in s.x})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
    ax.set(title=data.title, xlabel=data.xlabel, ylabel=data.ylabel)
    ax.grid(True, alpha=0.3)
    if data.series:
        artists.append(ax.legend(fontsize="small"))
    return artists


def bar_plot(ax: Any, data: BarData) -> list[Any]:
    """Stacked bars, one per category."""
    artists: list[Any] = []
    bottom = [0.0] * len(data.categories)
    for name, values in data.stacks:
        bars = ax.bar(data.categories, values, bottom=bottom, label=name)
        artists.append(bars)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set(title=data.title, xlabel=data.xlabel, ylabel=data.ylabel)
    if data.ymax is not None:
        ax.set_ylim(0.0, data.ymax)
    ax.grid(True, axis="y", alpha=0.3)
    if len(data.stacks) > 1:
        artists.append(ax.legend(fontsize="small", loc="upper right", ncols=len(data.stacks)))
    return artists


def render_png(panels: list[LineData | BarData], width_in: float = 6.0, height_in: float = 4.0) -> bytes:
    """Side-by-side panels as one PNG."""
    fig = Figure(figsize=(width_in * len(panels), height_in), layout="constrained")
    for ax, panel in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        if isinstance(panel, LineData):
            line_plot(ax, panel)
        else:
            bar_plot(ax, panel)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
