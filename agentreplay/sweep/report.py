"""Sweep report: tables of the cells and the figures the grid supports, as Markdown and self-contained HTML.

Compute first (:func:`build_report` returns data: facts, tables, figure panels, skip reasons), draw second
(:mod:`agentreplay.sweep.plots`), render last (:func:`to_markdown`, :func:`to_html`). Which figure uses which
parameter is decided from the parameter paths:

- load axis: ``*.concurrency`` or ``*.rate_per_s``;
- grouping axis: ``preset``, else a ``policy.*`` field, else any path naming a policy, else a text parameter;
- factor for the gain figure: a ``*scale`` parameter, else another numeric one, else the load axis;
- router: a ``router.*`` parameter; tier: a ``tiers.*`` parameter or a path naming dram / cxl / offload / tier.

Only parameters with two or more values count. Figures average over seeds and over the parameters they do not
show, and say so; a figure the grid cannot support is replaced by one line saying why.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from agentreplay.sweep.plots import BarData, LineData, Series, data_uri, render_png
from agentreplay.sweep.spec import Param, fmt

TABLE_FIGURES = [
    ("jct_mean_s", "JCT mean (s)"),
    ("jct_p99_s", "JCT p99 (s)"),
    ("ttft_p99_s", "TTFT p99 (s)"),
    ("throughput_programs_per_s", "programs/s"),
    ("prefix_hit_rate", "hit rate"),
    ("preemptions", "preemptions"),
    ("wall_s", "wall (s)"),
]
MAX_SERIES = 8


@dataclass(frozen=True, slots=True)
class ReportFigure:
    name: str  #: file stem: fig-<name>.png
    title: str
    caption: str
    panels: list[LineData | BarData] = field(default_factory=list)
    skipped: str | None = None  #: why the grid cannot support this figure


@dataclass(frozen=True, slots=True)
class Report:
    title: str
    facts: list[tuple[str, str]]
    figures: list[ReportFigure]
    cells: pd.DataFrame  #: one row per cell, display-formatted
    failed: pd.DataFrame  #: label, attempts, error


@dataclass(frozen=True, slots=True)
class Axes:
    varying: list[Param]
    load: Param | None
    group: Param | None
    factor: Param | None
    router: Param | None
    tier: Param | None


def load_results(sweep_dir: str | Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """The manifest and the result rows of the manifest's cells (DuckDB over ``results/``)."""
    from agentreplay.query import query

    d = Path(sweep_dir)
    manifest_path = d / "sweep.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{d}: no sweep.json (not the output folder of `agentreplay sweep`)")
    manifest = json.loads(manifest_path.read_text())
    if not (d / "results").is_dir():
        raise FileNotFoundError(f"{d}: no results/ yet (no cell has finished)")
    rows = query("select * from results", d)
    ids = [c["cell_id"] for c in manifest["cells"]]
    rows = rows[rows["cell_id"].isin(ids)].copy()
    rows["_order"] = rows["cell_id"].map({cid: i for i, cid in enumerate(ids)})
    return manifest, rows.sort_values("_order").drop(columns="_order").reset_index(drop=True)


def detect_axes(params: list[Param]) -> Axes:
    varying = [p for p in params if len(p.values) > 1]
    numeric = [p for p in varying if p.kind in ("int", "float")]

    def first(pred: Any, among: list[Param] = varying) -> Param | None:
        return next((p for p in among if pred(p)), None)

    load = first(lambda p: p.path.endswith(("concurrency", "rate_per_s")), numeric)
    tier = first(lambda p: p.path.startswith("tiers.") or any(w in p.path for w in ("dram", "cxl", "offload", "tier")))
    group = (
        first(lambda p: p.path == "preset")
        or first(lambda p: p.path.startswith("policy."))
        or first(lambda p: "policy" in p.path)
        or first(lambda p: p.kind == "str" and p is not tier)
    )
    rest = [p for p in numeric if p not in (load, group)]
    factor = first(lambda p: p.path.endswith("scale"), rest) or (rest[0] if rest else load)
    router = first(lambda p: p.path.startswith("router."))
    return Axes(varying, load, group, factor, router, tier)


def _mean_by(ok: pd.DataFrame, by: list[Param], cols: list[str]) -> pd.DataFrame:
    return ok.groupby([p.column for p in by], sort=False)[cols].mean().reset_index()


def _col(p: Param, v: Any) -> Any:
    return json.dumps(v) if p.kind == "list" else v


def _combos(ps: list[Param]) -> list[tuple[Any, ...]]:
    return list(itertools.product(*(p.values for p in ps)))


def _select(df: pd.DataFrame, ps: list[Param], combo: tuple[Any, ...]) -> pd.DataFrame:
    mask = pd.Series(True, index=df.index)
    for p, v in zip(ps, combo, strict=True):
        mask &= df[p.column] == _col(p, v)
    return df[mask]


def _name(ps: list[Param], combo: tuple[Any, ...]) -> str:
    return " ".join(f"{p.short}={fmt(v)}" for p, v in zip(ps, combo, strict=True)) or "all cells"


def _averaged(ax: Axes, shown: Sequence[Param | None]) -> str:
    rest = [p.short for p in ax.varying if p not in shown]
    return f" Averaged over seeds{' and ' + ', '.join(rest) if rest else ''}."


def jct_vs_load(ok: pd.DataFrame, ax: Axes) -> ReportFigure:
    title = "JCT vs load"
    if ax.load is None:
        return ReportFigure(
            "jct-vs-load",
            title,
            "",
            skipped="no load axis (workload.concurrency or workload.rate_per_s with two or more values) in the grid",
        )
    others = [p for p in ax.varying if p is not ax.load]
    series_ps = others if len(_combos(others)) <= MAX_SERIES else [p for p in (ax.group,) if p is not None]
    agg = _mean_by(ok, [*series_ps, ax.load], ["jct_mean_s", "jct_p99_s"])
    means, tails = [], []
    for i, combo in enumerate(_combos(series_ps)):
        sel = _select(agg, series_ps, combo).sort_values(ax.load.column)
        if sel.empty:
            continue
        x = sel[ax.load.column].tolist()
        means.append(Series(_name(series_ps, combo), x, sel["jct_mean_s"].tolist(), colour=i))
        tails.append(Series(_name(series_ps, combo), x, sel["jct_p99_s"].tolist(), colour=i))
    logx = ax.load.kind == "int" and min(ax.load.values) > 0 and max(ax.load.values) / min(ax.load.values) >= 8
    panels: list[LineData | BarData] = [
        LineData("mean JCT", ax.load.path, "JCT mean (s)", means, logx=logx),
        LineData("p99 JCT", ax.load.path, "JCT p99 (s)", tails, logx=logx),
    ]
    caption = f"Program JCT against {ax.load.path}, one line per {' x '.join(p.short for p in series_ps) or 'sweep'}."
    return ReportFigure("jct-vs-load", title, caption + _averaged(ax, [ax.load, *series_ps]), panels)


def gain_vs_factor(ok: pd.DataFrame, ax: Axes) -> ReportFigure:
    title = "JCT gain over the baseline"
    g, f = ax.group, ax.factor
    if g is None:
        return ReportFigure(
            "gain",
            title,
            "",
            skipped="no grouping axis (preset, a policy or another text "
            "parameter with two or more values) to compare against a baseline",
        )
    if f is None or f is g:
        return ReportFigure(
            "gain",
            title,
            "",
            skipped=f"no numeric factor besides {g.path} to plot the gain "
            "against (e.g. tools.scale or workload.concurrency)",
        )
    base = g.values[0]
    keys = [p.column for p in ax.varying if p is not g] + ["seed"]
    b = ok[ok[g.column] == _col(g, base)][[*keys, "jct_mean_s", "jct_p99_s"]]
    series = []
    for i, v in enumerate(g.values[1:]):
        m = ok[ok[g.column] == _col(g, v)].merge(b, on=keys, suffixes=("", "_base"))
        if m.empty:
            continue
        for metric in ("jct_mean_s", "jct_p99_s"):
            m[f"gain_{metric}"] = 100.0 * (m[f"{metric}_base"] - m[metric]) / m[f"{metric}_base"]
        by = m.groupby(f.column)[["gain_jct_mean_s", "gain_jct_p99_s"]].mean().reset_index().sort_values(f.column)
        x = by[f.column].tolist()
        series.append(Series(f"{fmt(v)} mean", x, by["gain_jct_mean_s"].tolist(), colour=i))
        series.append(Series(f"{fmt(v)} p99", x, by["gain_jct_p99_s"].tolist(), dashed=True, colour=i))
    if not series:
        return ReportFigure("gain", title, "", skipped=f"no finished cell pairs differ only in {g.path}")
    caption = (
        f"Relative JCT gain of each {g.short} over {g.short}={fmt(base)} (positive = faster; solid mean, "
        f"dashed p99), cell pairs matched on every other parameter and seed, against {f.path}."
    )
    panel = LineData(f"gain over {g.short}={fmt(base)}", f.path, "JCT gain (%)", series, zero_line=True)
    return ReportFigure("gain", title, caption + _averaged(ax, [g, f]), [panel])


def hit_rate_vs_router(ok: pd.DataFrame, ax: Axes) -> ReportFigure:
    title = "Prefix hit rate vs router"
    r = ax.router
    if r is None:
        return ReportFigure(
            "hit-rate-router", title, "", skipped="no router parameter (router.*) with two or more values in the grid"
        )
    cols = ["prefix_hit_rate_shared_prefix", "prefix_hit_rate_own_history"]
    agg = _mean_by(ok, [r], cols)
    cats = [v for v in r.values if not _select(agg, [r], (v,)).empty]
    stacks = [
        (name, [float(_select(agg, [r], (v,))[c].iloc[0]) for v in cats])
        for name, c in (("shared prefix", cols[0]), ("own history", cols[1]))
    ]
    panel = BarData(
        "prefix hit rate", r.path, "prompt tokens served from cache", [fmt(v) for v in cats], stacks, ymax=1.15
    )
    caption = f"Share of prompt tokens served from the prefix cache, by {r.path}, split by where the hit came from."
    return ReportFigure("hit-rate-router", title, caption + _averaged(ax, [r]), [panel])


def tail_vs_tier(ok: pd.DataFrame, ax: Axes) -> ReportFigure:
    title = "Tail JCT with and without a memory tier"
    t = ax.tier
    if t is None:
        return ReportFigure(
            "tier-tail",
            title,
            "",
            skipped="no tier parameter (tiers.*, or a path naming dram, "
            "cxl, offload or tier) with two or more values in the grid",
        )

    def name(v: Any) -> str:
        return f"{t.short}={fmt(v)}" + (" (off)" if v in (0, 0.0, False) else "")

    if ax.load is not None and ax.load is not t:
        agg = _mean_by(ok, [t, ax.load], ["jct_p99_s"])
        series = [
            Series(
                name(v),
                (s := _select(agg, [t], (v,)).sort_values(ax.load.column))[ax.load.column].tolist(),
                s["jct_p99_s"].tolist(),
                colour=i,
            )
            for i, v in enumerate(t.values)
        ]
        panel: LineData | BarData = LineData("p99 JCT", ax.load.path, "JCT p99 (s)", series)
        shown = [t, ax.load]
    else:
        agg = _mean_by(ok, [t], ["jct_p99_s"])
        cats = [v for v in t.values if not _select(agg, [t], (v,)).empty]
        panel = BarData(
            "p99 JCT",
            t.path,
            "JCT p99 (s)",
            [name(v) for v in cats],
            [("p99 JCT", [float(_select(agg, [t], (v,))["jct_p99_s"].iloc[0]) for v in cats])],
        )
        shown = [t]
    caption = f"p99 program JCT by {t.path}."
    return ReportFigure("tier-tail", title, caption + _averaged(ax, shown), [panel])


def build_report(sweep_dir: str | Path) -> Report:
    manifest, rows = load_results(sweep_dir)
    params = [Param(p["path"], p["column"], p["short"], tuple(p["values"]), p["kind"]) for p in manifest["params"]]
    ok = rows[rows["status"] == "ok"]
    ax = detect_axes(params)
    figures = [fn(ok, ax) for fn in (jct_vs_load, gain_vs_factor, hit_rate_vs_router, tail_vs_tier)]
    if ok.empty:
        figures = [ReportFigure(f.name, f.title, "", skipped="no cell finished ok") for f in figures]
    n_cells = len(manifest["cells"])
    facts = [
        ("trace", manifest["trace"]),
        ("seeds", ", ".join(map(str, manifest["seeds"]))),
        (
            "cells",
            f"{n_cells} ({len(ok)} ok, {int((rows['status'] == 'failed').sum())} failed, "
            f"{n_cells - len(rows)} not run)",
        ),
        *((f"parameter {p.path}", ", ".join(fmt(v) for v in p.values)) for p in params),
        ("simulation time", f"{rows['wall_s'].sum():,.1f} s over all cells"),
        ("base config", "base-config.toml beside the results"),
    ]
    cells = pd.DataFrame(
        {
            "cell": rows["cell_id"],
            "label": rows["label"],
            "status": rows["status"],
            "attempts": rows["attempts"],
            **{name: rows[c].map(_num) for c, name in TABLE_FIGURES if c in rows},
        }
    )
    failed = rows.loc[rows["status"] == "failed", ["cell_id", "label", "attempts", "error"]]
    return Report(f"Sweep report: {Path(sweep_dir).resolve().name}", facts, figures, cells, failed)


def _num(v: Any) -> str:
    if v is None or (isinstance(v, numbers.Real) and math.isnan(v)):
        return "-"
    if isinstance(v, numbers.Integral) or float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3f}" if abs(v) >= 0.01 else f"{v:.2e}"


def _md_table(df: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def to_markdown(report: Report, images: dict[str, str]) -> str:
    """``images``: figure name -> PNG file name beside the Markdown."""
    out = [f"# {report.title}", "", *(f"- **{k}**: {v}" for k, v in report.facts), "", "## Figures", ""]
    for f in report.figures:
        out += [f"### {f.title}", ""]
        out += [f"Skipped: {f.skipped}.", ""] if f.skipped else [f"![{f.title}]({images[f.name]})", "", f.caption, ""]
    out += ["## Cells", "", _md_table(report.cells), ""]
    if len(report.failed):
        out += ["## Failed cells", "", _md_table(report.failed), ""]
    return "\n".join(out)


def _html_table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in df.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(report: Report, pngs: dict[str, bytes]) -> str:
    """One self-contained page: the figures are embedded as base64 PNGs."""
    e = html.escape
    parts = [
        f"<h1>{e(report.title)}</h1><ul>"
        + "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in report.facts)
        + "</ul><h2>Figures</h2>"
    ]
    for f in report.figures:
        parts.append(f"<h3>{e(f.title)}</h3>")
        parts.append(
            f"<p class='skip'>Skipped: {e(f.skipped)}.</p>"
            if f.skipped
            else f"<figure><img alt='{e(f.title)}' src='{data_uri(pngs[f.name])}'>"
            f"<figcaption>{e(f.caption)}</figcaption></figure>"
        )
    parts.append("<h2>Cells</h2>" + _html_table(report.cells))
    if len(report.failed):
        parts.append("<h2>Failed cells</h2>" + _html_table(report.failed))
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:0.85em}td,th{border:1px solid #ccc;padding:2px 6px;"
        "text-align:right}td:nth-child(2){text-align:left}img{max-width:100%}.skip{color:#777}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(report.title)}</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def write_report(sweep_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Report, dict[str, Path]]:
    """Render ``sweep_dir``'s report into ``out_dir`` (default ``sweep_dir/report``): report.md, report.html and
    one PNG per figure. Returns the report and the paths written."""
    report = build_report(sweep_dir)
    out = Path(out_dir) if out_dir is not None else Path(sweep_dir) / "report"
    out.mkdir(parents=True, exist_ok=True)
    pngs = {f.name: render_png(f.panels) for f in report.figures if not f.skipped}
    paths: dict[str, Path] = {}
    for name, png in pngs.items():
        paths[name] = out / f"fig-{name}.png"
        paths[name].write_bytes(png)
    paths["markdown"] = out / "report.md"
    paths["markdown"].write_text(to_markdown(report, {n: p.name for n, p in paths.items()}))
    paths["html"] = out / "report.html"
    paths["html"].write_text(to_html(report, pngs))
    return report, paths
