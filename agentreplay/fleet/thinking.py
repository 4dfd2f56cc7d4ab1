"""Thinking budget on a trace: tail JCT by reasoning-token cap and load (``agentreplay fleet-thinking``).

Compute first (:func:`run_budgets`), draw second (:func:`plot_tail`, :func:`draw`), render third
(:func:`markdown`). Semantics: :mod:`agentreplay.sim.thinking`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentreplay.fleet.figures import subplots
from agentreplay.sim.config import SimConfig
from agentreplay.sim.thinking import ThinkingConfig, ThinkingStats, apply
from agentreplay.sim.workload import Workload


def parse_budgets(text: str) -> list[int | None]:
    """``"none,256,64,0"`` -> ``[None, 256, 64, 0]`` (``none``: no cap); ValueError naming a bad item."""
    out: list[int | None] = []
    for item in text.split(","):
        item = item.strip().lower()
        if item in ("none", "off", ""):
            out.append(None)
            continue
        try:
            v = int(item)
        except ValueError:
            raise ValueError(f"--budgets item {item!r}: an integer >= 0 or 'none'") from None
        if v < 0:
            raise ValueError(f"--budgets item {item!r}: an integer >= 0 or 'none'")
        out.append(v)
    return out


def trace_stats(workload: Workload) -> ThinkingStats:
    """What the trace records: turns with reasoning, turns without a recorded count, reasoning tokens."""
    return apply(workload, ThinkingConfig())[1]


def run_budgets(
    workload: Workload,
    base: SimConfig,
    loads: Sequence[int],
    budgets: Sequence[int | None],
    reasoning_in_context: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Simulate every budget at every load (closed loop, ``load`` programs in flight); one row per run, with the
    tail JCT change against the first budget of the list at the same load."""
    from agentreplay.sim.run import simulate

    rows: list[dict[str, Any]] = []
    for load in loads:
        ref: dict[str, float] | None = None
        for b in budgets:
            label = "none" if b is None else str(b)
            if progress is not None:
                progress(f"load {load}: budget {label}")
            cfg = base.replace(
                workload={"concurrency": load},
                thinking={"budget_tokens": b, "reasoning_in_context": reasoning_in_context},
            )
            res = simulate(workload, cfg)
            s = res.summary
            th = s.get("thinking", {})
            j = s["jct_s"]
            ref = ref or j
            rows.append(
                {
                    "load": load,
                    "budget": label,
                    "turns_capped": th.get("turns_capped", 0),
                    "cut_tokens": th.get("cut_tokens", 0),
                    "output_tokens": s["output_tokens"],
                    "jct_p50_s": j["p50"],
                    "jct_p90_s": j["p90"],
                    "jct_p99_s": j["p99"],
                    "p90_change": j["p90"] / ref["p90"] - 1.0,
                    "p99_change": j["p99"] / ref["p99"] - 1.0,
                    "tpot_p50_s": s["tpot_s"]["p50"],
                }
            )
    return rows


def plot_tail(ax: Any, rows: list[dict[str, Any]]) -> Any:
    """p90 and p99 JCT change against the first budget of the list (no cap), per load."""
    budgets = list(dict.fromkeys(r["budget"] for r in rows))
    for load in sorted({r["load"] for r in rows}):
        for q, style in (("p90", "o-"), ("p99", "s--")):
            y = [
                100.0 * next(r[f"{q}_change"] for r in rows if r["load"] == load and r["budget"] == b) for b in budgets
            ]
            ax.plot(range(len(budgets)), y, style, label=f"{load} in flight, {q}")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(range(len(budgets)), budgets)
    ax.set_xlabel("reasoning-token budget per turn")
    ax.set_ylabel(f"JCT change vs budget {budgets[0]}, %")
    ax.set_title("tail JCT by thinking budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def draw(rows: list[dict[str, Any]], path: Path) -> Path:

    fig, ax = subplots(figsize=(7, 4.5))
    plot_tail(ax, rows)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


HEAD = ["load", "budget", "turns capped", "tokens cut", "output tokens", "JCT p50 s", "JCT p90 s", "JCT p99 s"]
HEAD += ["p90 vs first", "p99 vs first", "TPOT p50 ms"]


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(r["load"]),
            r["budget"],
            f"{r['turns_capped']:,}",
            f"{r['cut_tokens']:,}",
            f"{r['output_tokens']:,}",
            f"{r['jct_p50_s']:,.1f}",
            f"{r['jct_p90_s']:,.1f}",
            f"{r['jct_p99_s']:,.1f}",
            f"{r['p90_change']:+.2%}",
            f"{r['p99_change']:+.2%}",
            f"{r['tpot_p50_s'] * 1e3:,.1f}",
        ]
        for r in rows
    ]


def markdown(title: str, rows: list[dict[str, Any]], notes: Sequence[str]) -> str:
    lines = [f"# {title}", "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(rows)]
    lines += ["", *notes, ""]
    return "\n".join(lines)
