"""Thinking budget on a trace: tail JCT by reasoning-token cap and load (``agentreplay fleet thinking``).

Variants: every budget at every load (closed loop, ``load`` programs in flight), the first budget of the list the
reference of the tail change at its load. Compute first (:func:`rows_of`), draw second (:func:`plot_tail`),
render third (:func:`markdown`). Semantics of a cap: :mod:`agentreplay.features.thinking.budget`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentreplay.experiment import Experiment, Run, View, about, about_of, over_seeds, param
from agentreplay.experiment.params import check, command_line
from agentreplay.experiment.tables import markdown as md_table

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.experiment import Results
    from agentreplay.features.thinking.budget import ThinkingStats
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload

RULE = "output' = max(1, out - max(0, min(reasoning, out) - budget))"


@dataclass(frozen=True, slots=True)
class ThinkingParams:
    programs: int | None = param(None, "First N programs of the trace.", none="all")
    loads: tuple[int, ...] = param((4, 64), "Programs in flight (closed loop), comma-separated.")
    budgets: tuple[int | None, ...] = param(
        (None, 128, 32, 0), "Reasoning tokens allowed per turn, comma-separated; none = no cap (listed first)."
    )
    reasoning_in_context: bool = param(False, "Earlier turns' thinking is part of later prompts (cuts shrink them).")

    def __post_init__(self) -> None:
        check(self.programs is None or self.programs >= 1, "--programs", self.programs, "an integer >= 1")
        check(bool(self.loads) and min(self.loads) >= 1, "--loads", self.loads, "integers >= 1")
        check(len(set(self.loads)) == len(self.loads), "--loads", self.loads, "each load once")
        for b in self.budgets:
            check(b is None or b >= 0, "--budgets item", b, "an integer >= 0 or 'none'")
        check(len(set(self.budgets)) == len(self.budgets), "--budgets", self.budgets, "each budget once")


def budget_label(b: int | None) -> str:
    return "none" if b is None else str(b)


def trace_stats(workload: Workload) -> ThinkingStats:
    """What the trace records: turns with reasoning, turns without a recorded count, reasoning tokens."""
    from agentreplay.features.thinking.budget import apply
    from agentreplay.features.thinking.config import ThinkingConfig

    return apply(workload, ThinkingConfig())[1]


def rows_of(runs: dict[str, Run], p: ThinkingParams) -> pd.DataFrame:
    """One row per (load, budget) from the runs' summaries, with the tail change against the first budget at the
    same load."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for load in p.loads:
        ref: dict[str, float] | None = None
        for b in p.budgets:
            s = runs[Thinking.label(load, b)].summary()
            th = s.get("thinking", {})
            j = s["jct_s"]
            ref = ref or j
            rows.append(
                {
                    "load": load,
                    "budget": budget_label(b),
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
    return pd.DataFrame(rows).set_index(["load", "budget"])


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
    from agentreplay.fleet.figures import save, subplots

    fig, ax = subplots(figsize=(7, 4.5))
    plot_tail(ax, rows)
    return save(fig, path)


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
    return f"# {title}\n\n" + md_table(HEAD, table_rows(rows)) + "\n".join(["", *notes, ""])


def _records(tables: dict[str, pd.DataFrame]) -> list[dict[str, Any]]:
    from agentreplay.experiment.tables import flat

    return flat(tables["thinking"]).to_dict("records")  # type: ignore[no-any-return]


class Thinking(Experiment):
    name = "thinking"
    summary = "Thinking budget: tail JCT (p90, p99) when each turn's reasoning tokens are capped."
    description = (
        "Output tokens drop by max(0, reasoning - budget); later prompts keep their recorded size unless "
        "--reasoning-in-context (agentreplay.features.thinking.budget). Turns without a recorded reasoning count stay "
        "uncapped. Writes thinking.md and thinking.png."
    )
    example = "agentreplay fleet thinking --budgets none,128,32,0 --loads 4,64"
    Params = ThinkingParams
    hardware = MappingProxyType({"gpu": "h100-sxm", "model": "llama-3.1-70b", "tp": 4})
    outputs = ("thinking.md", "thinking.png")

    @staticmethod
    def label(load: int, budget: int | None) -> str:
        return f"load {load}: budget {budget_label(budget)}"

    def configs(self, base: SimConfig, p: ThinkingParams) -> dict[str, SimConfig]:
        base = base.replace(workload={"max_programs": p.programs})
        return {
            self.label(load, b): base.replace(
                workload={"concurrency": load},
                thinking={"budget_tokens": b, "reasoning_in_context": p.reasoning_in_context},
            )
            for load in p.loads
            for b in p.budgets
        }

    def analyse(self, results: Results, p: ThinkingParams) -> dict[str, pd.DataFrame]:
        import pandas as pd

        from agentreplay.experiment.worker import cached_workload

        tables = over_seeds(results, lambda runs: {"thinking": rows_of(runs, p)})
        w = cached_workload(results.trace)
        stats = trace_stats(w.head(p.programs) if p.programs else w)
        hw = results.base.hardware
        title = f"thinking budget: {hw.model} TP{hw.tp} on {hw.gpu}, {results.trace.name}" + (
            f" (first {p.programs} programs)" if p.programs else ""
        )
        line = (
            f"trace: {stats.turns:,} turns, {stats.turns_with_reasoning:,} with reasoning tokens "
            f"({stats.reasoning_tokens:,} tokens), {stats.turns_unrecorded:,} without a recorded count (left uncapped)"
        )
        prompts = (
            "later prompts shrink by the earlier cuts." if p.reasoning_in_context else "later prompts as recorded."
        )
        notes = [
            line + ".",
            f"Rule (agentreplay.features.thinking.budget): {RULE}; {prompts}",
            *([f"Mean over seeds {', '.join(map(str, results.seeds))}."] if len(results.seeds) > 1 else []),
            f"Command: {command_line(p, self.name)}",
        ]
        tables["thinking_trace"] = pd.DataFrame([stats.as_dict()])
        tables["_about"] = about(title=title, line=line, notes=notes)
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        a, rows = about_of(tables), _records(tables)
        (out / "thinking.md").write_text(markdown(a["title"], rows, a["notes"]))
        return [out / "thinking.md", draw(rows, out / "thinking.png")]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        a = about_of(tables)
        return [View(a["title"], HEAD, table_rows(_records(tables)), notes=[a["line"]], left=2)]


EXPERIMENT = Thinking()
