"""Sub-agent fan-out on a trace under several routers (``agentreplay fleet fanout``).

Adds sub-agents to the first ``programs`` programs of the trace (:func:`agentreplay.fanout.fan_out`, drawn from the
seed), then runs the fan-out trace and the roots alone under each router; the figures are defined in
:mod:`agentreplay.features.fanout.experiment_measure`. Variants: ``ROUTER`` (with the fan-out) and ``ROUTER, no
fan-out`` per router.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from agentreplay.experiment import Experiment, View, about, about_of, over_seeds, param
from agentreplay.experiment.params import ParamError, check, command_line
from agentreplay.experiment.tables import flat
from agentreplay.experiment.tables import markdown as md_table
from agentreplay.features.fanout.experiment_measure import (
    PROGRAMS,
    TURNS,
    RunColumns,
    measure,
    roots_only,
    with_savings,
)

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.experiment import Results, Run
    from agentreplay.fanout import FanOutStats
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload
    from agentreplay.trace.io import Trace

NO_FANOUT = ", no fan-out"
#: the table's columns (after the router), as printed
HEAD = ["prefill tokens", "saved vs REF", "sibling hit rate", "workflow JCT p50 (s)", "workflow JCT p90 (s)"]
HEAD += ["root JCT p50, no fan-out (s)", "root JCT p90, no fan-out (s)", "others' hit rate", "... in bursts"]
HEAD += ["others' hit rate, no fan-out"]


@dataclass(frozen=True, slots=True)
class FanoutParams:
    programs: int = param(100, "Root programs taken from the start of the trace.")
    fanout: int = param(4, "Children per spawning turn.")
    fanout_prob: float = param(0.05, "Chance that a non-last turn spawns.")
    share: Literal["context", "system"] = param(
        "context", "Prefix a child shares with its parent: context (the parent's prompt) or system."
    )
    max_child_turns: int = param(10, "Cut each child after this many turns.")
    spawn_delay: float = param(0.0, "Seconds from the spawning call's finish to the children's arrival.")
    routers: tuple[str, ...] = param(
        ("cache-aware", "least-loaded", "round-robin"), "Router names (agentreplay.router.policies), comma-separated."
    )
    reference: str = param("round-robin", "Router the prefill savings are measured against.")
    instances: int = param(4, "Instances.")
    concurrency: int = param(32, "Workflows in flight (closed loop over root programs).")

    def __post_init__(self) -> None:
        check(self.programs >= 1, "--programs", self.programs, "an integer >= 1")
        check(self.fanout >= 1, "--fanout", self.fanout, "an integer >= 1")
        check(0 <= self.fanout_prob <= 1, "--fanout-prob", self.fanout_prob, "a probability in [0, 1]")
        check(self.max_child_turns >= 1, "--max-child-turns", self.max_child_turns, "an integer >= 1")
        check(self.spawn_delay >= 0, "--spawn-delay", self.spawn_delay, "seconds >= 0")
        check(len(set(self.routers)) == len(self.routers), "--routers", self.routers, "each router once")
        check(self.instances >= 1, "--instances", self.instances, "an integer >= 1")
        check(self.concurrency >= 1, "--concurrency", self.concurrency, "an integer >= 1")
        if self.reference not in self.routers:
            raise ParamError(f"reference router {self.reference!r} is not among the routers {list(self.routers)}")


def fan_trace(trace: Trace, p: FanoutParams, seed: int) -> tuple[Trace, FanOutStats]:
    """The first ``p.programs`` programs of ``trace`` with their sub-agents drawn from ``seed``."""
    from agentreplay.fanout import fan_out
    from agentreplay.trace.io import Trace

    keep = set(trace.programs["program_id"].iloc[: p.programs])
    src = Trace(
        trace.programs[trace.programs["program_id"].isin(keep)], trace.turns[trace.turns["program_id"].isin(keep)]
    )
    return fan_out(
        src,
        fanout=p.fanout,
        prob=p.fanout_prob,
        share=p.share,
        seed=seed,
        max_child_turns=p.max_child_turns,
        delay_s=p.spawn_delay,
    )


def build(trace: Path, p: FanoutParams, seed: int) -> tuple[Workload, FanOutStats]:
    """The fan-out workload of ``seed`` and what was drawn; ValueError when no turn spawned."""
    from agentreplay.experiment.worker import cached_trace
    from agentreplay.sim.workload import compile_trace

    fan, stats = fan_trace(cached_trace(trace), p, seed)
    w = compile_trace(fan)
    if w.dag is None:
        raise ValueError("no turn spawned: raise --fanout-prob or --programs")
    return w, stats


def tables_of(runs: dict[str, Run], p: FanoutParams, trace: Path) -> dict[str, pd.DataFrame]:
    """One seed's tables: the figures per router, each workflow's JCT, what the fan-out drew."""
    import numpy as np
    import pandas as pd

    w, stats = build(trace, p, next(iter(runs.values())).seed)
    wb = roots_only(w)

    def cols(run: Run) -> RunColumns:
        return RunColumns(run.columns("turns", TURNS), run.columns("programs", PROGRAMS))

    raw = [measure(r, cols(runs[r]), w, cols(runs[r + NO_FANOUT]), wb) for r in p.routers]
    rows = with_savings(raw, p.reference)
    figures = [{f.name: getattr(r, f.name) for f in fields(r) if f.name != "workflow_jct_s"} for r in rows]
    jct = pd.DataFrame(
        {
            "router": np.repeat([r.router for r in rows], [len(r.workflow_jct_s) for r in rows]),
            "workflow_jct_s": np.concatenate([r.workflow_jct_s for r in rows]),
        }
    )
    generated = {
        "candidate_turns": stats.candidate_turns,
        "spawning_turns": stats.spawning_turns,
        "spawn_share": stats.spawn_share,
        "children": stats.children,
        "child_turns": stats.child_turns,
    }
    return {
        "fanout": pd.DataFrame(figures).set_index("router"),
        "fanout_workflow_jct": jct,
        "fanout_generated": pd.DataFrame([generated]),
    }


def text_rows(table: pd.DataFrame) -> list[list[str]]:
    return [
        [
            r["router"],
            f"{r['prefill_tokens']:,}",
            f"{r['saved_tokens']:,}",
            f"{r['sibling_hit_rate']:.3f}",
            f"{r['workflow_jct_p50_s']:.1f}",
            f"{r['workflow_jct_p90_s']:.1f}",
            f"{r['root_jct_p50_s_no_fanout']:.1f}",
            f"{r['root_jct_p90_s_no_fanout']:.1f}",
            f"{r['others_hit_rate']:.3f}",
            f"{r['others_hit_rate_in_bursts']:.3f}",
            f"{r['others_hit_rate_no_fanout']:.3f}",
        ]
        for r in flat(table).to_dict("records")
    ]


def markdown(title: str, head: list[str], body: list[list[str]], notes: list[str]) -> str:
    return f"# {title}\n\n" + md_table(head, body) + "\n".join(["", *notes, ""])


def plot(tables: dict[str, pd.DataFrame], path: Path) -> Path:
    """Three panels: prefill tokens and sibling hit rate per router; workflow JCT CDFs; others' hit rate with and
    without fan-out."""
    import numpy as np

    from agentreplay.fleet.figures import save, subplots

    t = tables["fanout"]
    fig, axes = subplots(1, 3, figsize=(15, 4.2))
    names = list(t.index)
    x = np.arange(len(names))
    ax = axes[0]
    ax.bar(x, t["prefill_tokens"] / 1e6, color="tab:blue")
    ax.set_xticks(x, names)
    ax.set_ylabel("prefill tokens computed (M)")
    ax2 = ax.twinx()
    ax2.plot(x, t["sibling_hit_rate"], "o-", color="tab:red")
    ax2.set_ylim(0, 1.02)
    ax2.set_ylabel("sibling hit rate (red)")
    ax.set_title("prefill and sibling prefix hits")
    ax = axes[1]
    jct = tables["fanout_workflow_jct"]
    for name in names:
        v = np.sort(jct.loc[jct["router"] == name, "workflow_jct_s"].to_numpy())
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("workflow JCT (s)")
    ax.set_ylabel("share of workflows")
    ax.set_title("workflow JCT (root arrival to last node)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax = axes[2]
    ax.bar(x - 0.27, t["others_hit_rate_no_fanout"], 0.27, label="without fan-out")
    ax.bar(x, t["others_hit_rate"], 0.27, label="with others' sub-agents")
    ax.bar(x + 0.27, t["others_hit_rate_in_bursts"], 0.27, label="... calls during bursts")
    ax.set_xticks(x, names)
    ax.set_ylabel("prefix hit rate")
    ax.set_title("programs without sub-agents")
    ax.legend(loc="upper right", ncol=1, fontsize=8)
    ax.set_ylim(0, 1.45)
    return save(fig, path)


class Fanout(Experiment):
    name = "fanout"
    summary = "Sub-agent fan-out: sibling prefix sharing by router, workflow JCT, eviction of others' prefixes."
    description = (
        "Adds sub-agents to the first PROGRAMS programs of the trace (agentreplay.fanout: each non-last turn spawns "
        "FANOUT children with probability FANOUT_PROB, drawn from the seed; the parent's next turn joins them), then "
        "simulates the fan-out trace and the roots alone under each router, and reports prefill tokens computed (and "
        "saved against the reference router), the sibling hit rate, workflow JCT p50 / p90, and the hit rate of "
        "programs without sub-agents with and without the others' bursts. Writes fanout.md, fanout.png and "
        "summary.json."
    )
    example = "agentreplay fleet fanout --fanout 4 --fanout-prob 0.05 --routers cache-aware,least-loaded,round-robin"
    Params = FanoutParams
    hardware = MappingProxyType({"gpu": "h100-sxm", "model": "llama-3.1-8b"})
    outputs = ("fanout.md", "fanout.png", "summary.json")

    def workload(self, label: str, trace: Path, p: FanoutParams, seed: int) -> Trace | Workload:
        w, _ = build(trace, p, seed)
        return roots_only(w) if label.endswith(NO_FANOUT) else w

    def configs(self, base: SimConfig, p: FanoutParams) -> dict[str, SimConfig]:
        start = base.replace(hardware={"instances": p.instances}, workload={"concurrency": p.concurrency})
        out = {}
        for r in p.routers:
            out[r] = out[r + NO_FANOUT] = start.replace(router={"policy": r})
        return {label: out[label] for label in [*p.routers, *(r + NO_FANOUT for r in p.routers)]}

    def analyse(self, results: Results, p: FanoutParams) -> dict[str, pd.DataFrame]:
        tables = over_seeds(results, lambda runs: tables_of(runs, p, results.trace))
        hw, gen = results.base.hardware, flat(tables["fanout_generated"]).to_dict("records")[0]
        title = (
            f"Fan-out: {p.programs} programs of {results.trace.name}, {gen['spawning_turns']} spawning turns x "
            f"{p.fanout} children ({gen['child_turns']:,} child turns), {p.instances}x {hw.gpu}, {hw.model}"
        )
        notes = [
            f"Command: {command_line(p, self.name)}",
            *([f"Mean over seeds {', '.join(map(str, results.seeds))}."] if len(results.seeds) > 1 else []),
            "",
            "Definitions: agentreplay/features/fanout/experiment_measure.py. Figure: fanout.png.",
        ]
        summary = {
            "trace": str(results.trace),
            "programs": p.programs,
            "fanout": p.fanout,
            "fanout_prob": p.fanout_prob,
            "share": p.share,
            "max_child_turns": p.max_child_turns,
            "spawn_delay_s": p.spawn_delay,
            "instances": p.instances,
            "concurrency": p.concurrency,
            "gpu": hw.gpu,
            "model": hw.model,
            "seed": results.seeds[0] if len(results.seeds) == 1 else list(results.seeds),
        }
        tables["_about"] = about(title=title, notes=notes, summary=summary, reference=p.reference)
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        import json

        from agentreplay.experiment.results import plain_json

        a = about_of(tables)
        head = ["router", *(h.replace("REF", a["reference"]) for h in HEAD)]
        (out / "fanout.md").write_text(markdown(a["title"], head, text_rows(tables["fanout"]), a["notes"]))
        gen = flat(tables["fanout_generated"]).to_dict("records")
        doc = {
            **a["summary"],
            "generated": gen[0] if len(gen) == 1 else gen,
            "rows": flat(tables["fanout"]).to_dict("records"),
        }
        (out / "summary.json").write_text(json.dumps(plain_json(doc), indent=2, sort_keys=True) + "\n")
        return [out / "fanout.md", plot(tables, out / "fanout.png"), out / "summary.json"]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        a = about_of(tables)
        head = ["router", *(h.replace("REF", a["reference"]) for h in HEAD)]
        return [View(a["title"], head, text_rows(tables["fanout"]))]


EXPERIMENT = Fanout()
