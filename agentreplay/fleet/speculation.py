"""Speculative decoding on a trace: JCT by drafter, acceptance rate and load (``agentreplay fleet-spec``).

Compute first (:func:`run_cases`, :func:`batch_curve`: plain data), draw second (:func:`plot_speedup`,
:func:`plot_jct`, :func:`draw`), render third (:func:`markdown`). Semantics: :mod:`agentreplay.sim.speculative`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentreplay.fleet.figures import subplots
from agentreplay.perf.speculative import SpeculativePricer
from agentreplay.sim.config import SimConfig
from agentreplay.sim.speculative import draft_pricer, expected_tokens
from agentreplay.sim.workload import Workload

#: Per-tool-class acceptance used by the ``per-class`` case: ILLUSTRATIVE, not measured (no acceptance trace of
#: this workload exists): edits echo file text and tool-call syntax (low entropy, n-gram lookup hits), reads and
#: searches quote paths and code, test / build commands are freer text.
ILLUSTRATIVE_BY_CLASS: dict[str, float] = {
    "edit": 0.8,
    "vcs": 0.7,
    "submit": 0.7,
    "read": 0.6,
    "search": 0.6,
    "test": 0.5,
    "build": 0.5,
    "other": 0.5,
}


@dataclass(frozen=True)
class Case:
    """One speculation setting: a label and its ``[speculative]`` fields (empty: off)."""

    label: str
    spec: dict[str, Any] = field(default_factory=dict)


def default_cases(k: int, rates: Sequence[float], draft_model: str) -> list[Case]:
    """Off; n-gram at each rate; the draft model at each rate; n-gram with :data:`ILLUSTRATIVE_BY_CLASS`."""
    cases = [Case("none")]
    cases += [Case(f"ngram a={a:g}", {"method": "ngram", "num_speculative_tokens": k, "acceptance": a}) for a in rates]
    cases += [
        Case(
            f"draft {draft_model} a={a:g}",
            {"method": "draft_model", "num_speculative_tokens": k, "acceptance": a, "draft_model": draft_model},
        )
        for a in rates
    ]
    cases.append(
        Case(
            "ngram per-class",
            {
                "method": "ngram",
                "num_speculative_tokens": k,
                "acceptance": 0.5,
                "acceptance_by_tool_class": dict(ILLUSTRATIVE_BY_CLASS),
            },
        )
    )
    return cases


def run_cases(
    workload: Workload,
    base: SimConfig,
    loads: Sequence[int],
    cases: Sequence[Case],
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Simulate every case at every load (closed loop, ``load`` programs in flight); one row per run."""
    from agentreplay.sim.run import simulate

    rows: list[dict[str, Any]] = []
    for load in loads:
        ref: float | None = None
        for case in cases:
            if progress is not None:
                progress(f"load {load}: {case.label}")
            cfg = base.replace(workload={"concurrency": load}, speculative=case.spec)
            res = simulate(workload, cfg)
            s = res.summary
            inst = res.instances
            sp = s.get("speculative", {})
            p50 = s["jct_s"]["p50"]
            ref = p50 if ref is None else ref
            rows.append(
                {
                    "load": load,
                    "case": case.label,
                    "jct_p50_s": p50,
                    "jct_p90_s": s["jct_s"]["p90"],
                    "jct_p99_s": s["jct_s"]["p99"],
                    "jct_p50_change": p50 / ref - 1.0,
                    "tpot_p50_s": s["tpot_s"]["p50"],
                    "ttft_p50_s": s["ttft_s"]["p50"],
                    "output_tokens_per_s": s["throughput_output_tokens_per_s"],
                    "mean_running": float(inst["running"].mean()) if len(inst) else float("nan"),
                    "tokens_per_step": sp.get("tokens_per_step", 1.0),
                    "reprefilled_tokens_bound": sp.get("reprefilled_tokens_bound", 0),
                    "reprefill_share": sp.get("reprefilled_tokens_bound", 0) / max(s["input_tokens"], 1),
                }
            )
    return rows


def batch_curve(
    cfg: SimConfig,
    k: int,
    rates: Sequence[float],
    draft_model: str,
    batches: Sequence[int],
    contexts: Sequence[int],
) -> list[dict[str, Any]]:
    """Decode speed-up of speculation per batch size and context on the configured target, priced without
    simulation: a plain step of ``n`` sequences at ``ctx`` tokens each emits ``n`` tokens; a verification step
    emits ``n E(a, k)`` on average. Speed-up = plain step / (verification step / E); below 1 speculation costs.
    Long contexts make decode KV-bound, which the k + 1 queries share (one KV pass), so speculation pays to
    larger batches there (as MagicDec, Chen et al. 2024, argues for long-context serving)."""
    from agentreplay.perf.table import pricer_from_names

    hw = cfg.hardware
    target = pricer_from_names("roofline", hw.gpu, hw.model, hw.dtype, hw.tp, mixed_attention=hw.mixed_attention)
    drafters: dict[str, Any] = {
        "ngram": None,
        f"draft {draft_model}": draft_pricer(
            cfg.replace(speculative={"method": "draft_model", "draft_model": draft_model}), (hw.gpu, hw.tp, hw.dtype)
        ),
    }
    rows = []
    for label, drafter in drafters.items():
        pricer = SpeculativePricer(target, k, drafter)
        for a in rates:
            e = expected_tokens(a, k)
            for ctx in contexts:
                for n in batches:
                    a0, c0 = target.decode_coeffs(n)
                    a1, c1 = pricer.decode_coeffs(n)
                    plain = a0 + c0 * n * ctx
                    spec = a1 + c1 * n * ctx
                    rows.append(
                        {"drafter": label, "acceptance": a, "ctx": ctx, "batch": n, "speedup": plain / (spec / e)}
                    )
    return rows


def crossover(curve: list[dict[str, Any]]) -> dict[str, int | None]:
    """Per (drafter, acceptance, context): the smallest batch where speculation costs (speed-up < 1), None if
    never in the batches priced."""
    out: dict[str, int | None] = {}
    for r in curve:
        key = f"{r['drafter']} a={r['acceptance']:g}, {r['ctx']:,}-token contexts"
        out.setdefault(key, None)
        if out[key] is None and r["speedup"] < 1.0:
            out[key] = r["batch"]
    return out


def plot_speedup(ax: Any, curve: list[dict[str, Any]], ctx: int) -> Any:
    keys = sorted({(r["drafter"], r["acceptance"]) for r in curve})
    for drafter, a in keys:
        pts = [
            (r["batch"], r["speedup"])
            for r in curve
            if r["drafter"] == drafter and r["acceptance"] == a and r["ctx"] == ctx
        ]
        ax.plot(*zip(*pts, strict=True), "-" if drafter == "ngram" else "--", label=f"{drafter}, a={a:g}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode batch (sequences)")
    ax.set_ylabel("decode speed-up (tokens/s vs no speculation)")
    ax.set_title(f"where speculation pays: {ctx:,}-token contexts")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def plot_jct(ax: Any, rows: list[dict[str, Any]]) -> Any:
    """JCT p50 (bars) and p90 (ticks) of each case relative to no speculation at the same load."""
    loads = sorted({r["load"] for r in rows})
    cases = [c for c in dict.fromkeys(r["case"] for r in rows) if c != "none"]
    width = 0.8 / max(len(cases), 1)
    x = np.arange(len(loads))

    def rel(load: int, case: str, q: str) -> float:
        ref = next(r[q] for r in rows if r["load"] == load and r["case"] == "none")
        return 100.0 * (next(r[q] for r in rows if r["load"] == load and r["case"] == case) / ref - 1.0)

    for i, c in enumerate(cases):
        ax.bar(x + i * width, [rel(ld, c, "jct_p50_s") for ld in loads], width, label=c)
        ax.plot(x + i * width, [rel(ld, c, "jct_p90_s") for ld in loads], "k_", ms=8)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x + 0.4 - width / 2, [f"{ld} in flight" for ld in loads])
    ax.set_ylabel("JCT change vs no speculation, % (bars p50, ticks p90)")
    ax.set_title("JCT on the trace")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    return ax


def draw(rows: list[dict[str, Any]], curve: list[dict[str, Any]], path: Path) -> Path:

    contexts = sorted({r["ctx"] for r in curve}, reverse=True)
    fig, axes = subplots(1, 1 + len(contexts), figsize=(6.5 * (1 + len(contexts)), 4.8))
    plot_jct(axes[0], rows)
    for ax, ctx in zip(axes[1:], contexts, strict=True):
        plot_speedup(ax, curve, ctx)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


HEAD = ["load", "case", "JCT p50 s", "JCT p90 s", "JCT p99 s", "p50 vs none", "TPOT p50 ms", "TTFT p50 s"]
HEAD += ["out tok/s", "mean running", "tokens/step", "re-prefill bound"]


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(r["load"]),
            r["case"],
            f"{r['jct_p50_s']:,.1f}",
            f"{r['jct_p90_s']:,.1f}",
            f"{r['jct_p99_s']:,.1f}",
            f"{r['jct_p50_change']:+.1%}",
            f"{r['tpot_p50_s'] * 1e3:,.1f}",
            f"{r['ttft_p50_s']:,.2f}",
            f"{r['output_tokens_per_s']:,.0f}",
            f"{r['mean_running']:,.1f}",
            f"{r['tokens_per_step']:.2f}",
            f"{r['reprefill_share']:.2%}",
        ]
        for r in rows
    ]


def markdown(title: str, rows: list[dict[str, Any]], cross: dict[str, int | None], notes: Sequence[str]) -> str:
    lines = [f"# {title}", "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(rows)]
    lines += ["", "Smallest decode batch where speculation costs (priced steps, figure right; up to 512):", ""]
    lines += [f"- {k}: {v if v is not None else 'never in the range'}" for k, v in cross.items()]
    lines += ["", *notes, ""]
    return "\n".join(lines)
