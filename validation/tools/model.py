"""From canonical traces to a tool-model file: load durations, fit (``validation.tools.fit``), compare sources,
test a repository covariate, and render a Markdown report with QQ and CDF plots.

Units of observation (``unit``):

- ``turn`` (default): ``turns.tool_duration_s``, the wall time between an LLM call and the next one's
  release (parallel Claude Code calls overlap, so this is max(end) - min(start) of the turn's calls). This is
  what the simulator's ``gap_s(turn)`` draws, so model files for the generative mode use it.
- ``call``: ``tool_calls.duration_s``, one row per individually timed call (traces that have the table).

``kind`` keeps only durations of one ``tool_duration_kind`` (``measured`` / ``estimated``); measured and
estimated durations are different quantities (DESIGN §3) and should not be pooled in one model.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from agentreplay.sim.tools_generative import FORMAT, VERSION, ClassDist, write_tool_model
from agentreplay.trace.io import read_trace
from validation.tools.fit import CANDIDATES, MIN_CLASS_N, MIN_N, MIX_MIN_N, SIGMA_FLOOR, ClassFit, fit_classes

Unit = Literal["turn", "call"]
COLUMNS = ["trace", "source", "program_id", "task_id", "repo", "tool_class", "duration_s", "kind"]


def load_durations(trace_dir: str | Path, *, unit: Unit = "turn", kind: str | None = None) -> pd.DataFrame:
    """One row per duration (seconds) with its trace, source, task, repository (task_id before ``__``),
    tool class and kind. Rows without a duration (a program's last turn) are dropped."""
    tr = read_trace(trace_dir, with_tool_calls=unit == "call")
    progs = tr.programs.set_index("program_id")
    if unit == "turn":
        df = tr.turns.dropna(subset=["tool_duration_s"])
        df = df.rename(columns={"tool_duration_s": "duration_s", "tool_duration_kind": "kind"})
    else:
        if tr.tool_calls is None:
            raise ValueError(f"{trace_dir}: no tool_calls.parquet (use unit='turn')")
        df = tr.tool_calls.rename(columns={"duration_kind": "kind"})
    # Calls of tasks without a program row (no readable token trace) keep their id as the task.
    task = df["program_id"].map(progs["task_id"]).fillna(df["program_id"].str.rsplit("/", n=1).str[-1])
    source = df["program_id"].map(progs["source"]).fillna(df["program_id"].str.split("/", n=1).str[0])
    out = pd.DataFrame(
        {
            "trace": str(trace_dir),
            "source": source.astype(str),
            "program_id": df["program_id"],
            "task_id": task.astype(str),
            "repo": task.astype(str).str.split("__", n=1).str[0],
            "tool_class": df["tool_class"],
            "duration_s": df["duration_s"].astype(float),
            "kind": df["kind"].fillna("unknown"),
        }
    )
    if kind is not None:
        out = out[out["kind"] == kind]
    return out.reset_index(drop=True)[COLUMNS]


def _git_commit(where: Path) -> str | None:
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return res.stdout.strip() or None


def _input_provenance(trace_dir: Path, d: pd.DataFrame) -> dict[str, Any]:
    info: dict[str, Any] = {
        "path": str(trace_dir),
        "n": len(d),
        "kinds": d["kind"].value_counts().to_dict(),
        "sources": sorted(d["source"].unique().tolist()),
    }
    manifest = trace_dir / "MANIFEST.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        info.update({k: m[k] for k in ("source_repository", "source_commit") if k in m})
    return info


@dataclass(frozen=True)
class ToolFitResult:
    """What ``fit-tools`` computes: the model file content, the per-class fits and the data they came from."""

    model: dict[str, Any]
    fits: dict[str, ClassFit]
    overall: ClassFit
    skipped: list[str]  #: classes with no positive duration (the sampler uses ``overall`` for them)
    durations: pd.DataFrame
    #: classes with fewer than ``MIN_CLASS_N`` durations -> their count (pooled: the sampler uses ``overall``)
    pooled: dict[str, int] = field(default_factory=dict)


def fit_tools(trace_dirs: Sequence[str | Path], *, unit: Unit = "turn", kind: str | None = None) -> ToolFitResult:
    """Pool the durations of ``trace_dirs``, fit every class and ``overall``, and build the model file."""
    parts = [load_durations(d, unit=unit, kind=kind) for d in trace_dirs]
    data = pd.concat(parts, ignore_index=True)
    if data.empty:
        raise ValueError(f"no durations in {list(map(str, trace_dirs))} (unit={unit!r}, kind={kind!r})")
    fits, overall, skipped = fit_classes(data["tool_class"].to_numpy(), data["duration_s"].to_numpy())
    counts = data["tool_class"].value_counts()
    pooled = {str(c): int(n) for c, n in counts.sort_index().items() if n < MIN_CLASS_N}
    fits = {c: f for c, f in fits.items() if c not in pooled}
    skipped = [c for c in skipped if c not in pooled]
    label = ",".join(sorted(data["source"].unique())) + ":" + ",".join(sorted(data["kind"].unique()))
    provenance = {
        "inputs": [_input_provenance(Path(d), p) for d, p in zip(trace_dirs, parts, strict=True)],
        "unit": unit,
        "kind_filter": kind,
        "code_commit": _git_commit(Path(__file__).parent),
        "fitter": "validation.tools.fit",
        "candidates": list(CANDIDATES),
        "selection": "lowest AIC",
        "zero_model": "point mass p_zero at 0 s plus the family on the positive part",
        "min_n": MIN_N,
        "mix_min_n": MIX_MIN_N,
        "mix_sigma_floor": SIGMA_FLOOR,
        "unfitted_classes": skipped,
        "min_class_n": MIN_CLASS_N,
        "pooled_classes": pooled,
    }
    model = {
        "format": FORMAT,
        "version": VERSION,
        "provenance": provenance,
        "default_source": label,
        "classes": {c: f.entry() for c, f in fits.items()},
        "overall": overall.entry(),
    }
    return ToolFitResult(model, fits, overall, skipped, data, pooled)


def write_model(result: ToolFitResult, path: str | Path) -> Path:
    return write_tool_model(path, _json_safe(result.model))


def _json_safe(v: Any) -> Any:
    """Non-finite floats (an infinite mean, say) become null: JSON has no inf/nan."""
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    if isinstance(v, float | np.floating):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    return v


def fit_table(result: ToolFitResult) -> pd.DataFrame:
    """One row per fitted class (and ``overall``): n, chosen family, params, AIC, BIC, KS, AD, model quantiles."""
    rows = []
    for c, f in [*result.fits.items(), ("overall", result.overall)]:
        e = f.entry()
        rows.append(
            {
                "class": c,
                "n": f.n,
                "p_zero": f.p_zero,
                "family": e["family"],
                "params": " ".join(f"{k}={v:.3g}" for k, v in e["params"].items()),
                "aic": e["aic"],
                "bic": e["bic"],
                "ks": e["ks"],
                "ks_p": e["ks_p"],
                "ad": e["ad"],
                "ad_p": e["ad_p"],
                "median_s": e["median_s"],
                "p90_s": e["p90_s"],
                "emp_median_s": f.empirical["median_s"],
                "emp_p90_s": f.empirical["p90_s"],
            }
        )
    return pd.DataFrame(rows)


def compare_sources(a: pd.DataFrame, b: pd.DataFrame, label_a: str = "a", label_b: str = "b") -> pd.DataFrame:
    """Per class both sources have (and ``all``): n, median and p90 (s) of each, and the two-sample KS test."""
    rows = []
    common = sorted(set(a["tool_class"]) & set(b["tool_class"]))
    for c in [*common, "all"]:
        xa = a["duration_s"].to_numpy() if c == "all" else a.loc[a["tool_class"] == c, "duration_s"].to_numpy()
        xb = b["duration_s"].to_numpy() if c == "all" else b.loc[b["tool_class"] == c, "duration_s"].to_numpy()
        ks = stats.ks_2samp(xa, xb)
        rows.append(
            {
                "class": c,
                f"n_{label_a}": len(xa),
                f"n_{label_b}": len(xb),
                f"median_{label_a}_s": float(np.median(xa)),
                f"median_{label_b}_s": float(np.median(xb)),
                f"p90_{label_a}_s": float(np.quantile(xa, 0.9)),
                f"p90_{label_b}_s": float(np.quantile(xb, 0.9)),
                "ks2": float(ks.statistic),
                "ks2_p": float(ks.pvalue),
            }
        )
    return pd.DataFrame(rows)


def repo_covariate(durations: pd.DataFrame, tool_class: str = "test", min_rows: int = 5) -> dict[str, Any] | None:
    """Does the repository explain ``tool_class`` durations? OLS of ``ln d`` on repository dummies (statsmodels)
    against the intercept-only model (= the unconditional lognormal), on positive durations of repositories
    with at least ``min_rows`` of them. AIC/BIC are of the duration density in seconds (Jacobian ``-sum ln d``
    included, sigma counted as a parameter), so the unconditional AIC equals the lognormal fit's."""
    import statsmodels.formula.api as smf

    d = durations[(durations["tool_class"] == tool_class) & (durations["duration_s"] > 0)]
    d = d[d.groupby("repo")["repo"].transform("size") >= min_rows]
    if len(d) < 2 * min_rows or d["repo"].nunique() < 2:
        return None
    frame = pd.DataFrame({"ly": np.log(d["duration_s"].to_numpy()), "repo": d["repo"].to_numpy()})
    jac = float(frame["ly"].sum())
    out: dict[str, Any] = {"class": tool_class, "n": len(frame), "repos": int(frame["repo"].nunique())}
    for name, formula in (("uncond", "ly ~ 1"), ("repo", "ly ~ C(repo)")):
        res = smf.ols(formula, frame).fit()
        k = int(res.df_model) + 2  # intercept + dummies + sigma
        ll = float(res.llf) - jac
        out[f"aic_{name}"] = 2 * k - 2 * ll
        out[f"bic_{name}"] = k * math.log(len(frame)) - 2 * ll
        if name == "repo":
            out["adj_r2"] = float(res.rsquared_adj)
            out["f_p"] = float(res.f_pvalue)
    out["delta_aic"] = out["aic_repo"] - out["aic_uncond"]
    out["delta_bic"] = out["bic_repo"] - out["bic_uncond"]
    out["improves"] = bool(out["delta_aic"] < -2)  # AIC's verdict; BIC's (heavier per-repo penalty) beside it
    out["improves_bic"] = bool(out["delta_bic"] < -2)
    return out


# --- plots (compute first, draw second; helpers take an ax and return artists) -------------------------------


def plot_qq(ax: Any, x: np.ndarray, dist: ClassDist) -> list[Any]:
    """Log-log QQ plot of the positive durations against the fitted continuous part."""
    xs = np.sort(x[x > 0])
    q = (np.arange(1, len(xs) + 1) - 0.5) / len(xs)
    model = dist.fam.ppf(dist.params, q)
    arts = ax.loglog(model, xs, ".", ms=2, alpha=0.6)
    lim = [min(xs[0], model[0]), max(xs[-1], model[-1])]
    arts += ax.loglog(lim, lim, "k--", lw=0.8)
    ax.set_xlabel(f"{dist.family} quantile (s)")
    ax.set_ylabel("observed quantile (s)")
    return arts


def plot_cdf(ax: Any, x: np.ndarray, dist: ClassDist) -> list[Any]:
    """Empirical CDF of all durations (zeros included) against the fitted model CDF, log x axis."""
    xs = np.sort(x)
    pos = xs[xs > 0]
    arts = ax.step(pos, np.searchsorted(xs, pos, side="right") / len(xs), where="post", label="observed")
    grid = np.geomspace(pos[0], pos[-1], 400)
    arts += ax.plot(grid, dist.cdf(grid), label=f"{dist.family} (p_zero {dist.p_zero:.3f})")
    ax.set_xscale("log")
    ax.set_xlabel("duration (s)")
    ax.set_ylabel("CDF")
    ax.legend(loc="lower right", fontsize=8)
    return arts


def plot_too_few(ax: Any, x: np.ndarray, overall: ClassDist, name: str) -> list[Any]:
    """A pooled class: its few durations as points on the ``overall`` model CDF, and a title that says so."""
    pos = x[x > 0]
    lo, hi = (float(pos.min()) / 10, float(pos.max()) * 10) if len(pos) else (1e-3, 1e3)
    grid = np.geomspace(lo, hi, 400)
    arts = ax.plot(grid, overall.cdf(grid), label=f"overall: {overall.family}")
    if len(pos):
        arts += ax.plot(pos, overall.cdf(pos), "o", label=f"{name} durations")
    ax.set_xscale("log")
    ax.set_xlabel("duration (s)")
    ax.set_ylabel("CDF")
    ax.set_title(f"{name}: too few samples (n = {len(x)} < {MIN_CLASS_N})\npooled with overall", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    return arts


def _md_table(df: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "-" if not math.isfinite(v) else f"{v:.4g}"
        return "-" if v is None else str(v)

    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def write_report(
    result: ToolFitResult,
    out_dir: str | Path,
    *,
    comparison: pd.DataFrame | None = None,
    covariates: list[dict[str, Any]] | None = None,
) -> Path:
    """``out_dir/tool_fit.md`` plus ``qq_<class>.png`` and ``cdf_<class>.png`` per fitted class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = result.durations
    md = [
        f"# Tool-gap fit: {result.model['default_source']}",
        "",
        f"Unit: {result.model['provenance']['unit']}; inputs: "
        + ", ".join(f"{i['path']} (n={i['n']})" for i in result.model["provenance"]["inputs"]),
        "",
        "Model: point mass `p_zero` at 0 s plus a continuous family on the positive part, chosen by AIC. "
        "KS/AD are computed on the positive part (KS p-values are optimistic: parameters were estimated "
        "from the same data).",
        "",
        "## Chosen families",
        "",
        _md_table(fit_table(result)),
        "",
    ]
    if result.skipped:
        md += ["Not fitted (no positive duration; sampled from `overall`): " + ", ".join(result.skipped), ""]
    if result.pooled:
        md += [
            f"Too few samples for a model of their own (fewer than {MIN_CLASS_N} durations; pooled with "
            "`overall`, which the simulator draws them from): "
            + ", ".join(f"{c} (n = {n})" for c, n in result.pooled.items()),
            "",
        ]
        for c, n in result.pooled.items():
            x = data.loc[data["tool_class"] == c, "duration_s"].to_numpy()
            fig, ax = plt.subplots(figsize=(4.5, 4))
            plot_too_few(ax, x, result.overall.dist(), c)
            fig.tight_layout()
            fig.savefig(out / f"cdf_{c}.png", dpi=90)
            plt.close(fig)
            md += [
                f"## {c}",
                "",
                f"n = {n}: too few samples (< {MIN_CLASS_N}), pooled with overall.",
                "",
                f"![CDF {c}](cdf_{c}.png)",
                "",
            ]
    for c, f in [*result.fits.items(), ("overall", result.overall)]:
        x = (
            data["duration_s"].to_numpy()
            if c == "overall"
            else data.loc[data["tool_class"] == c, "duration_s"].to_numpy()
        )
        cand = pd.DataFrame(
            [
                {
                    "family": g.family,
                    "k": g.k,
                    "loglik": g.loglik,
                    "aic": g.aic,
                    "delta_aic": g.aic - f.chosen.aic,
                    "bic": g.bic,
                    "ks": g.ks,
                    "ks_p": g.ks_p,
                    "params": ", ".join(f"{k}={v:.4g}" for k, v in g.params.items()),
                }
                for g in f.fits
            ]
        )
        md += [
            f"## {c}",
            "",
            f"n = {f.n}, zeros = {f.n_zero}; AD = {f.ad:.4g} "
            f"(p = {'n/a' if f.ad_p is None else f'{f.ad_p:.3g}'}; {f.ad_method})",
            "",
            _md_table(cand),
            "",
            f"![QQ {c}](qq_{c}.png) ![CDF {c}](cdf_{c}.png)",
            "",
        ]
        for name, helper in (("qq", plot_qq), ("cdf", plot_cdf)):
            fig, ax = plt.subplots(figsize=(4.5, 4))
            helper(ax, x, f.dist())
            ax.set_title(f"{c}: {f.chosen.family}")
            fig.tight_layout()
            fig.savefig(out / f"{name}_{c}.png", dpi=90)
            plt.close(fig)
    if comparison is not None:
        md += ["## Sources compared (two-sample KS per class)", "", _md_table(comparison), ""]
    if covariates:
        md += ["## Repository as a covariate (OLS on ln duration)", "", _md_table(pd.DataFrame(covariates)), ""]
    path = out / "tool_fit.md"
    path.write_text("\n".join(md))
    return path
