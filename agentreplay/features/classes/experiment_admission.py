"""Admit-all vs ThunderAgent's program-aware admission on a trace where KV is tight (``agentreplay fleet admission``).

Three runs of the same closed-loop cluster: every call admitted (vLLM), ThunderAgent with the acting footprint
decaying with a 1 s half-life, and ThunderAgent without decay (:mod:`agentreplay.router.thunderagent`). The table
holds JCT p50 / p90, throughput, preemptions and ThunderAgent's pauses, forced resumes, held time and footprint
peak; the figure the JCTs and the admitted footprint over time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentreplay.experiment import Run, param
from agentreplay.experiment.params import check
from agentreplay.features.classes.experiment_common import ClassStudy, Variants, given, rounded

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.sim.config import SimConfig

VARIANTS: Variants = {
    "admit-all": {"admission": {"policy": "admit-all"}},
    "thunderagent (decay 1 s)": {
        "admission": {"policy": "thunderagent", "thunder_acting_token_decay": True, "thunder_half_life_s": 1.0}
    },
    "thunderagent (no decay)": {"admission": {"policy": "thunderagent", "thunder_half_life_s": 0.0}},
}
HEAD = ["variant", "JCT p50 s", "JCT p90 s", "programs/h", "preemptions", "recomputed tokens", "pauses"]
HEAD += ["forced resumes", "held s / program", "footprint peak / capacity"]
#: the table's columns and the digits each is printed with (None: an integer)
COLUMNS = {
    "jct_p50_s": 1,
    "jct_p90_s": 1,
    "programs_per_h": 2,
    "preemptions": None,
    "recomputed_tokens": None,
    "pauses": None,
    "forced_resumes": None,
    "held_s_per_program": 1,
    "footprint_peak_share": 3,
}


@dataclass(frozen=True, slots=True)
class AdmissionParams:
    concurrency: int = param(64, "Programs in flight (closed loop).")
    num_gpu_blocks: int | None = param(
        None, "KV blocks per instance (overrides the memory model).", none="from GPU memory, the memory model"
    )
    max_programs: int | None = param(None, "Replay only the first N programs of the trace.", none="all")

    def __post_init__(self) -> None:
        check(self.concurrency >= 1, "--concurrency", self.concurrency, "an integer >= 1")
        check(self.num_gpu_blocks is None or self.num_gpu_blocks >= 1, "--num-gpu-blocks", self.num_gpu_blocks, ">= 1")
        check(self.max_programs is None or self.max_programs >= 1, "--max-programs", self.max_programs, ">= 1")


def row_of(s: dict[str, Any]) -> dict[str, Any]:
    a = s.get("admission", {})
    cap = float(a.get("capacity_tokens", 0.0))
    return {
        "jct_p50_s": s["jct_s"]["p50"],
        "jct_p90_s": s["jct_s"]["p90"],
        "programs_per_h": 3600 * s["throughput_programs_per_s"],
        "preemptions": int(s["preemptions"]),
        "recomputed_tokens": int(s["recomputed_tokens"]),
        "pauses": int(a.get("pauses", 0)),
        "forced_resumes": int(a.get("forced_resumes", 0)),
        "held_s_per_program": float(a.get("held_s_total", 0.0)) / int(s["programs"]),
        "footprint_peak_share": float(a["footprint_peak_tokens"]) / cap if cap else float("nan"),
    }


def footprint_rows(label: str, s: dict[str, Any]) -> list[dict[str, Any]]:
    """ThunderAgent's admitted footprint and paused programs over time (none for a run without the series)."""
    a = s.get("admission")
    if not a or not a.get("footprint_series"):
        return []
    cap = float(a["capacity_tokens"])
    return [
        {"variant": label, "time_s": t, "footprint_tokens": v, "paused_programs": k, "capacity_tokens": cap}
        for t, v, k in a["footprint_series"]
    ]


def plot_admission(ax_jct: Any, ax_fp: Any, tables: dict[str, pd.DataFrame]) -> tuple[Any, Any]:
    """Left: JCT p50 / p90 per variant; right: ThunderAgent's admitted footprint over time (share of capacity)."""
    import numpy as np

    t = tables["admission"]
    labels = list(t.index)
    x = np.arange(len(labels))
    ax_jct.bar(x - 0.2, t["jct_p50_s"], 0.4, label="JCT p50")
    ax_jct.bar(x + 0.2, t["jct_p90_s"], 0.4, label="JCT p90")
    ax_jct.set_xticks(x, labels, rotation=15)
    ax_jct.set_ylabel("JCT (s)")
    ax_jct.set_title("JCT by admission policy")
    ax_jct.grid(alpha=0.3, axis="y")
    ax_jct.legend()
    fp = tables["admission_footprint"]
    keys = ["seed", "variant"] if "seed" in fp.columns else ["variant"]
    for key, ser in fp.groupby(keys, sort=False):
        name = key[-1] if len(keys) > 1 else key[0]
        label = f"{name} (seed {key[0]})" if len(keys) > 1 else name
        ax_fp.plot(ser["time_s"] / 3600, ser["footprint_tokens"] / ser["capacity_tokens"], label=label, lw=0.8)
    ax_fp.axhline(1.0, color="k", lw=0.8, ls="--")
    ax_fp.set_xlabel("simulated time (h)")
    ax_fp.set_ylabel("admitted footprint / KV capacity")
    ax_fp.set_title("ThunderAgent: admitted programs' KV footprint")
    ax_fp.grid(alpha=0.3)
    ax_fp.legend()
    return ax_jct, ax_fp


class Admission(ClassStudy):
    name = "admission"
    summary = "Admit-all vs ThunderAgent program-aware admission: JCT, throughput, preemptions, pauses."
    description = (
        "Runs the trace three times on the same cluster: every call admitted (vLLM), ThunderAgent with the acting "
        "footprint decaying with a 1 s half-life, and ThunderAgent without decay (agentreplay.router.thunderagent). "
        "Writes table.md, summary.json (per variant, with the admitted-footprint time series) and admission.png."
    )
    example = "agentreplay fleet admission --concurrency 64 --out out/fleet/admission"
    Params = AdmissionParams
    hardware = MappingProxyType({})
    outputs = ("table.md", "summary.json", "admission.png")
    kind = "admission"
    head = HEAD
    variants = VARIANTS

    def base(self, base: SimConfig, p: AdmissionParams) -> SimConfig:
        return base.replace(
            **given(
                cache={"num_gpu_blocks": p.num_gpu_blocks},
                workload={"arrival": "closed", "concurrency": p.concurrency, "max_programs": p.max_programs},
            )
        )

    def title(self, base: SimConfig, p: AdmissionParams, trace: Path) -> str:
        b = self.base(base, p)
        hw = b.hardware
        return (
            f"admission on {trace.name}: {hw.model} on {hw.instances}x {hw.gpu}, {p.concurrency} programs in flight, "
            f"KV blocks {b.cache.num_gpu_blocks or 'from the memory model'}"
        )

    def rows_of(self, runs: dict[str, Run]) -> dict[str, pd.DataFrame]:
        import pandas as pd

        rows = [{"variant": label, **row_of(run.summary())} for label, run in runs.items()]
        series = [r for label, run in runs.items() for r in footprint_rows(label, run.summary())]
        cols = ["variant", "time_s", "footprint_tokens", "paused_programs", "capacity_tokens"]
        return {
            "admission": pd.DataFrame(rows).set_index("variant"),
            "admission_footprint": pd.DataFrame(series, columns=cols),
        }

    def text_rows(self, tables: dict[str, pd.DataFrame]) -> list[list[Any]]:
        t = tables["admission"]
        return [
            [label, *(rounded(r[c], d) for c, d in COLUMNS.items())]
            for label, r in zip(t.index, t.to_dict("records"), strict=True)
        ]

    def draw(self, left: Any, right: Any, tables: dict[str, pd.DataFrame]) -> Any:
        return plot_admission(left, right, tables)


EXPERIMENT = Admission()
