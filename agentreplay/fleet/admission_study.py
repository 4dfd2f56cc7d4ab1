"""Admission studies on a trace: ``fleet-admission`` (admit-all vs ThunderAgent) and ``fleet-priority`` (FCFS vs
priority classes, with and without deadline admission). Compute here, draw in :func:`plot_admission` /
:func:`plot_priority` (each takes its axes and returns them), files in :func:`write_figure`.

Each variant is one :func:`agentreplay.sim.simulate` run of the same trace and base configuration with a few
sections overridden; the rows are read from the run summaries (JCT percentiles, throughput, preemptions,
ThunderAgent's pauses and held time, per-class goodput: :mod:`agentreplay.router.thunderagent`,
:mod:`agentreplay.sim.classes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay.fleet.figures import subplots
from agentreplay.sim.admission_config import CLASSES
from agentreplay.sim.config import SimConfig

#: fleet-admission variants: label -> section overrides
ADMISSION_VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "admit-all": {"admission": {"policy": "admit-all"}},
    "thunderagent (decay 1 s)": {
        "admission": {"policy": "thunderagent", "thunder_acting_token_decay": True, "thunder_half_life_s": 1.0}
    },
    "thunderagent (no decay)": {"admission": {"policy": "thunderagent", "thunder_half_life_s": 0.0}},
}
#: fleet-priority variants (classes on in all): label -> section overrides
PRIORITY_VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "fcfs": {"policy": {"queue": "fcfs", "victim": "most-recent"}},
    "priority": {"policy": {"queue": "priority", "victim": "lowest-priority"}},
    "priority + defer": {
        "policy": {"queue": "priority", "victim": "lowest-priority"},
        "admission": {"policy": "deadline", "deadline_action": "defer"},
    },
    "priority + reject": {
        "policy": {"queue": "priority", "victim": "lowest-priority"},
        "admission": {"policy": "deadline", "deadline_action": "reject"},
    },
}


@dataclass(frozen=True, slots=True)
class Study:
    """The variants' summaries (in order) and the table rows built from them."""

    summaries: dict[str, dict[str, Any]]
    head: list[str]
    rows: list[list[Any]]


def run_variants(
    trace: Any,
    base: SimConfig,
    variants: dict[str, dict[str, dict[str, Any]]],
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Summary of each variant's run (``trace``: a Trace or Workload)."""
    from agentreplay.sim import simulate

    out: dict[str, dict[str, Any]] = {}
    for label, changes in variants.items():
        if progress is not None:
            progress(label)
        cfg = base
        for section, fields in changes.items():
            cfg = cfg.replace(**{section: {**fields}})
        out[label] = simulate(trace, cfg).summary
    return out


def admission_study(summaries: dict[str, dict[str, Any]]) -> Study:
    head = [
        "variant",
        "JCT p50 s",
        "JCT p90 s",
        "programs/h",
        "preemptions",
        "recomputed tokens",
        "pauses",
        "forced resumes",
        "held s / program",
        "footprint peak / capacity",
    ]
    rows = []
    for label, s in summaries.items():
        a = s.get("admission", {})
        n = int(s["programs"])
        cap = float(a.get("capacity_tokens", 0.0))
        rows.append(
            [
                label,
                round(s["jct_s"]["p50"], 1),
                round(s["jct_s"]["p90"], 1),
                round(3600 * s["throughput_programs_per_s"], 2),
                int(s["preemptions"]),
                int(s["recomputed_tokens"]),
                int(a.get("pauses", 0)),
                int(a.get("forced_resumes", 0)),
                round(float(a.get("held_s_total", 0.0)) / n, 1),
                round(float(a["footprint_peak_tokens"]) / cap, 3) if cap else "-",
            ]
        )
    return Study(summaries, head, rows)


def priority_study(summaries: dict[str, dict[str, Any]]) -> Study:
    head = ["variant", "class", "attempted", "rejected", "met", "goodput", "JCT p50 s", "JCT p90 s"]
    rows = []
    for label, s in summaries.items():
        for name in CLASSES:
            c = s.get("classes", {}).get(name)
            if c is None:
                continue
            rows.append(
                [
                    label,
                    name,
                    int(c["attempted"]),
                    int(c["rejected"]),
                    int(c["met"]),
                    round(float(c["goodput"]), 3),
                    round(float(c["jct_p50_s"]), 1),
                    round(float(c["jct_p90_s"]), 1),
                ]
            )
    return Study(summaries, head, rows)


def plot_admission(ax_jct: Any, ax_fp: Any, study: Study) -> tuple[Any, Any]:
    """Left: JCT p50 / p90 per variant; right: ThunderAgent's admitted footprint over time (share of capacity)."""
    import numpy as np

    labels = list(study.summaries)
    x = np.arange(len(labels))
    p50 = [s["jct_s"]["p50"] for s in study.summaries.values()]
    p90 = [s["jct_s"]["p90"] for s in study.summaries.values()]
    ax_jct.bar(x - 0.2, p50, 0.4, label="JCT p50")
    ax_jct.bar(x + 0.2, p90, 0.4, label="JCT p90")
    ax_jct.set_xticks(x, labels, rotation=15)
    ax_jct.set_ylabel("JCT (s)")
    ax_jct.set_title("JCT by admission policy")
    ax_jct.grid(alpha=0.3, axis="y")
    ax_jct.legend()
    for label, s in study.summaries.items():
        a = s.get("admission")
        if not a or not a.get("footprint_series"):
            continue
        ser = np.asarray(a["footprint_series"], dtype=float)
        ax_fp.plot(ser[:, 0] / 3600, ser[:, 1] / a["capacity_tokens"], label=label, lw=0.8)
    ax_fp.axhline(1.0, color="k", lw=0.8, ls="--")
    ax_fp.set_xlabel("simulated time (h)")
    ax_fp.set_ylabel("admitted footprint / KV capacity")
    ax_fp.set_title("ThunderAgent: admitted programs' KV footprint")
    ax_fp.grid(alpha=0.3)
    ax_fp.legend()
    return ax_jct, ax_fp


def plot_priority(ax_good: Any, ax_jct: Any, study: Study) -> tuple[Any, Any]:
    """Left: goodput per class per variant; right: JCT p90 per class per variant."""
    import numpy as np

    labels = list(study.summaries)
    x = np.arange(len(CLASSES))
    w = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        cls = study.summaries[label].get("classes", {})
        good = [float(cls.get(c, {}).get("goodput", np.nan)) for c in CLASSES]
        jct = [float(cls.get(c, {}).get("jct_p90_s", np.nan)) for c in CLASSES]
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


def write_figure(path: Path, draw: Callable[[Any, Any, Study], Any], study: Study, title: str) -> Path:

    fig, axes = subplots(1, 2, figsize=(13, 4.8))
    draw(axes[0], axes[1], study)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(v) for v in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"
