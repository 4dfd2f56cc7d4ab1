"""FCFS vs priority classes, with and without deadline admission, on a trace (``agentreplay fleet priority``).

Programs get a class (interactive, background, batch) from the trace's ``priority_class`` column or a seeded draw from
the mix, and a JCT deadline per class (:mod:`agentreplay.features.classes.classes`). Four runs: vLLM FCFS; vLLM priority
scheduling (queue by class then arrival, preempt the lowest class); priority plus deadline admission that defers late
programs' calls; priority plus deadline admission that rejects programs that cannot meet their deadline even alone
(:mod:`agentreplay.router.deadline`). The table holds goodput and JCT p50 / p90 per class and variant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentreplay.experiment import Run, param
from agentreplay.experiment.params import check
from agentreplay.features.classes.config import CLASSES
from agentreplay.features.classes.experiment_common import ClassStudy, Variants, given, rounded

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.sim.config import SimConfig

_PRIORITY = {"queue": "priority", "victim": "lowest-priority"}
VARIANTS: Variants = {
    "fcfs": {"policy": {"queue": "fcfs", "victim": "most-recent"}},
    "priority": {"policy": _PRIORITY},
    "priority + defer": {"policy": _PRIORITY, "admission": {"policy": "deadline", "deadline_action": "defer"}},
    "priority + reject": {"policy": _PRIORITY, "admission": {"policy": "deadline", "deadline_action": "reject"}},
}
HEAD = ["variant", "class", "attempted", "rejected", "met", "goodput", "JCT p50 s", "JCT p90 s"]
#: the table's columns and the digits each is printed with (None: a count)
COLUMNS = {"attempted": None, "rejected": None, "met": None, "goodput": 3, "jct_p50_s": 1, "jct_p90_s": 1}


@dataclass(frozen=True, slots=True)
class PriorityParams:
    concurrency: int = param(64, "Programs in flight (closed loop).")
    mix: Mapping[str, float] | None = param(
        None, "Class shares, e.g. interactive=0.2,background=0.3,batch=0.5.", none="that mix"
    )
    deadline_x: Mapping[str, float] | None = param(
        None,
        "Per-class deadline, multiple of the uncontended JCT, e.g. interactive=1.5.",
        none="interactive=1.5, background=3, batch=10",
    )
    deadline_s: Mapping[str, float] | None = param(
        None, "Per-class absolute deadline, seconds (overrides --deadline-x for that class).", none="none"
    )
    num_gpu_blocks: int | None = param(
        None, "KV blocks per instance (overrides the memory model).", none="from GPU memory, the memory model"
    )
    max_programs: int | None = param(None, "Replay only the first N programs of the trace.", none="all")

    def __post_init__(self) -> None:
        check(self.concurrency >= 1, "--concurrency", self.concurrency, "an integer >= 1")
        check(self.num_gpu_blocks is None or self.num_gpu_blocks >= 1, "--num-gpu-blocks", self.num_gpu_blocks, ">= 1")
        check(self.max_programs is None or self.max_programs >= 1, "--max-programs", self.max_programs, ">= 1")


def plot_priority(ax_good: Any, ax_jct: Any, tables: dict[str, pd.DataFrame]) -> tuple[Any, Any]:
    """Left: goodput per class per variant; right: JCT p90 per class per variant."""
    import numpy as np

    t = tables["priority"]
    labels = list(dict.fromkeys(t.index.get_level_values("variant")))
    x = np.arange(len(CLASSES))
    w = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        cls = t.xs(label, level="variant")
        good = [float(cls.loc[c, "goodput"]) if c in cls.index else np.nan for c in CLASSES]
        jct = [float(cls.loc[c, "jct_p90_s"]) if c in cls.index else np.nan for c in CLASSES]
        ax_good.bar(x + (i - (len(labels) - 1) / 2) * w, good, w, label=label)
        ax_jct.bar(x + (i - (len(labels) - 1) / 2) * w, jct, w, label=label)
    for ax, ylabel, title in (
        (ax_good, "goodput (met / attempted)", "goodput per class"),
        (ax_jct, "JCT p90 (s)", "JCT p90 per class"),
    ):
        ax.set_xticks(x, list(CLASSES))
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3, axis="y")
    ax_good.set_ylim(0, 1.05)
    ax_good.legend(fontsize=8)
    return ax_good, ax_jct


class Priority(ClassStudy):
    name = "priority"
    summary = "FCFS vs priority classes, with and without deadline admission: goodput and JCT per class."
    description = (
        "Programs get a class (interactive, background, batch) from the trace's priority_class column or a seeded "
        "draw from the mix, and a JCT deadline per class. Four runs: vLLM FCFS; vLLM priority scheduling (queue by "
        "class then arrival, preempt the lowest class); priority plus deadline admission that defers late programs' "
        "calls; priority plus deadline admission that rejects programs that cannot meet their deadline even alone "
        "(agentreplay.router.deadline). Writes table.md, summary.json and priority.png."
    )
    example = "agentreplay fleet priority --deadline-s interactive=900 --concurrency 48"
    Params = PriorityParams
    hardware = MappingProxyType({})
    outputs = ("table.md", "summary.json", "priority.png")
    kind = "priority"
    head = HEAD
    variants = VARIANTS

    def base(self, base: SimConfig, p: PriorityParams) -> SimConfig:
        per_class = {"mix": p.mix, "deadline_x": p.deadline_x, "deadline_s": p.deadline_s}
        classes = {"enabled": True, **{k: dict(v) for k, v in per_class.items() if v is not None}}
        return base.replace(
            **given(
                cache={"num_gpu_blocks": p.num_gpu_blocks},
                workload={"arrival": "closed", "concurrency": p.concurrency, "max_programs": p.max_programs},
            ),
            classes=classes,
        )

    def title(self, base: SimConfig, p: PriorityParams, trace: Path) -> str:
        c = self.base(base, p).classes
        dl = ", ".join(
            f"{k} {c.deadline_s[k]:g} s" if k in c.deadline_s else f"{k} {c.deadline_x[k]:g}x" for k in CLASSES
        )
        return f"priority classes on {trace.name}: {p.concurrency} programs in flight, deadlines {dl}"

    def rows_of(self, runs: dict[str, Run]) -> dict[str, pd.DataFrame]:
        import pandas as pd

        rows = []
        for label, run in runs.items():
            for name in CLASSES:
                c = run.summary().get("classes", {}).get(name)
                if c is None:
                    continue
                rows.append(
                    {
                        "variant": label,
                        "class": name,
                        "attempted": int(c["attempted"]),
                        "rejected": int(c["rejected"]),
                        "met": int(c["met"]),
                        "goodput": float(c["goodput"]),
                        "jct_p50_s": float(c["jct_p50_s"]),
                        "jct_p90_s": float(c["jct_p90_s"]),
                    }
                )
        cols = ["variant", "class", *COLUMNS]
        return {"priority": pd.DataFrame(rows, columns=cols).set_index(["variant", "class"])}

    def text_rows(self, tables: dict[str, pd.DataFrame]) -> list[list[Any]]:
        t = tables["priority"]
        return [
            [variant, name, *(rounded(r[c], d) for c, d in COLUMNS.items())]
            for (variant, name), r in zip(t.index, t.to_dict("records"), strict=True)
        ]

    def draw(self, left: Any, right: Any, tables: dict[str, pd.DataFrame]) -> Any:
        return plot_priority(left, right, tables)


EXPERIMENT = Priority()
