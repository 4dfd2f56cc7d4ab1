"""Colocated vs disaggregated prefill / decode at equal GPU count (``agentreplay fleet disagg``).

For ``gpus`` GPUs (instances of ``tp`` GPUs each) the study runs the colocated cluster (every instance prefills and
decodes, vLLM's default) and every split ``kP + (n - k)D`` (:mod:`agentreplay.features.disagg.disagg`) on the same trace
at each load (closed loop, programs in flight), and reports per cell: JCT p50 / p90, TTFT p50 / p90 / p99 (the client's
first token; for disaggregated cells the decode instance's, as vLLM's proxies stream it), the prefill instance's token
p50 / p90 apart, TPOT p50, throughput, GPU-hours per 1,000 tasks (GPUs x makespan / programs), KV bytes moved between
the pools and each pool's utilisation (busy time / (instances x makespan)).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from agentreplay.experiment import Experiment, View, about, about_of, over_seeds, param
from agentreplay.experiment.params import check
from agentreplay.experiment.tables import markdown

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.experiment import Results, Run
    from agentreplay.sim.config import SimConfig

COLUMNS = [
    "load",
    "cluster",
    "jct_p50_s",
    "jct_p90_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "prefill_token_p50_s",
    "prefill_token_p90_s",
    "tpot_p50_ms",
    "programs_per_h",
    "gpu_h_per_1k",
    "kv_moved_tb",
    "util_prefill",
    "util_decode",
]


@dataclass(frozen=True, slots=True)
class Cell:
    """One run: ``prefill`` = 0 for the colocated cluster of ``gpus / tp`` instances."""

    load: int
    prefill: int
    decode: int

    @property
    def name(self) -> str:
        return f"{self.prefill}P+{self.decode}D" if self.prefill else f"colocated x{self.decode}"


def cells(instances: int, loads: list[int]) -> list[Cell]:
    """Colocated, then every split with at least one instance per pool, per load."""
    if instances < 2:
        raise ValueError(f"--gpus: a split needs at least 2 instances, got {instances}")
    return [Cell(load, k, instances - k) for load in loads for k in range(instances)]


def cell_config(base: SimConfig, cell: Cell) -> SimConfig:
    wl = {"arrival": "closed", "concurrency": cell.load}
    if cell.prefill == 0:
        return base.replace(hardware={"instances": cell.decode}, workload=wl)
    dis = {"enabled": True, "prefill_instances": cell.prefill, "decode_instances": cell.decode}
    return base.replace(hardware={"instances": 1}, workload=wl, disagg=dis)


def row(cell: Cell, summary: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The table row of one finished run."""
    s = summary
    span = float(s["makespan_s"])
    d = s.get("disagg")
    busy = s["engine"]["busy_s_per_instance"]
    colo_util = sum(busy) / (len(busy) * span) if span > 0 else float("nan")
    return {
        "load": cell.load,
        "cluster": cell.name,
        "jct_p50_s": s["jct_s"]["p50"],
        "jct_p90_s": s["jct_s"]["p90"],
        "ttft_p50_s": s["ttft_s"]["p50"],
        "ttft_p90_s": s["ttft_s"]["p90"],
        "ttft_p99_s": s["ttft_s"]["p99"],
        "prefill_token_p50_s": d["prefill_ttft_s"]["p50"] if d else s["ttft_s"]["p50"],
        "prefill_token_p90_s": d["prefill_ttft_s"]["p90"] if d else s["ttft_s"]["p90"],
        "tpot_p50_ms": 1e3 * s["tpot_s"]["p50"],
        "programs_per_h": 3600.0 * s["throughput_programs_per_s"],
        "gpu_h_per_1k": gpus * span / 3600.0 / s["programs"] * 1000.0,
        "kv_moved_tb": (d["kv_bytes_transferred"] + d["kv_bytes_pulled"]) / 1e12 if d else 0.0,
        "util_prefill": d["utilisation"]["prefill"] if d else colo_util,
        "util_decode": d["utilisation"]["decode"] if d else colo_util,
    }


def to_markdown(rows: list[dict[str, Any]], title: str) -> str:
    """The table as Markdown (the committed example output)."""
    fmt = {
        "load": "{:d}",
        "cluster": "{}",
        "kv_moved_tb": "{:.2f}",
        "util_prefill": "{:.0%}",
        "util_decode": "{:.0%}",
        "programs_per_h": "{:.0f}",
    }
    body = [[fmt.get(c, "{:.3g}").format(r[c]) for c in COLUMNS] for r in rows]
    return f"# {title}\n\n" + markdown(COLUMNS, body)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """JCT p50 / p90 and TTFT p50 / p99 per cluster, one group of bars per load."""
    import numpy as np

    from agentreplay.fleet.figures import save, subplots

    loads = sorted({r["load"] for r in rows})
    names = list(dict.fromkeys(r["cluster"] for r in rows))
    fig, axes = subplots(len(loads), 2, figsize=(11, 3.6 * len(loads)), squeeze=False)
    x = np.arange(len(names))
    for i, load in enumerate(loads):
        by = {r["cluster"]: r for r in rows if r["load"] == load}
        for ax, (lo, hi, label) in zip(
            axes[i], (("jct_p50_s", "jct_p90_s", "JCT (s)"), ("ttft_p50_s", "ttft_p99_s", "TTFT (s)")), strict=True
        ):
            ax.bar(x - 0.2, [by[n][lo] for n in names], 0.4, label="p50")
            ax.bar(x + 0.2, [by[n][hi] for n in names], 0.4, label="p90" if lo.startswith("jct") else "p99")
            ax.set_xticks(x, names)
            ax.set_ylabel(label)
            if lo.startswith("ttft"):
                ax.set_yscale("log")  # the p99 spans orders of magnitude across the splits
            ax.set_title(f"{label.split()[0]}, {load} programs in flight")
            ax.grid(axis="y", alpha=0.3)
            ax.legend()
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save(fig, path)


@dataclass(frozen=True, slots=True)
class DisaggParams:
    gpus: int = param(4, "GPUs of every cluster compared (instances = GPUs / TP).")
    loads: tuple[int, ...] = param((32, 64), "Programs in flight (closed loop), comma-separated.")
    session_home: Literal["decode", "none"] = param(
        "decode", "[disagg] session_home: decode (the next turn pulls its prefix from its decode instance) or none."
    )
    link: Literal["rdma", "nvlink"] = param("rdma", "[disagg] link: rdma (50 GB/s per GPU) or nvlink.")
    first_token: Literal["decode", "prefill"] = param(
        "decode", "[disagg] first_token: the client's first token from the decode instance (vLLM) or the prefill one."
    )
    max_programs: int | None = param(None, "Replay only the first N programs of the trace.", none="all")

    def __post_init__(self) -> None:
        check(self.gpus >= 2, "--gpus", self.gpus, "at least 2 (a split needs an instance per pool)")
        check(bool(self.loads) and min(self.loads) >= 1, "--loads", self.loads, "integers >= 1")
        check(len(set(self.loads)) == len(self.loads), "--loads", self.loads, "each load once")
        check(self.max_programs is None or self.max_programs >= 1, "--max-programs", self.max_programs, ">= 1")


def label(cell: Cell) -> str:
    return f"{cell.name}, {cell.load} in flight"


def cells_of(base: SimConfig, p: DisaggParams) -> list[Cell]:
    tp = base.hardware.tp
    if p.gpus % tp:
        raise ValueError(f"--gpus {p.gpus} is not a multiple of the TP {tp}")
    return cells(p.gpus // tp, list(p.loads))


def rows_of(runs: dict[str, Run], cells_: list[Cell], gpus: int) -> pd.DataFrame:
    import pandas as pd

    rows = [row(c, runs[label(c)].summary(), gpus) for c in cells_]
    return pd.DataFrame(rows, columns=COLUMNS).set_index(["load", "cluster"])


def text_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [r["load"], r["cluster"], *(f"{r[c]:.0%}" if c.startswith("util") else f"{r[c]:.3g}" for c in COLUMNS[2:])]
        for r in rows
    ]


def _records(tables: dict[str, pd.DataFrame]) -> list[dict[str, Any]]:
    from agentreplay.experiment.tables import flat

    return flat(tables["disagg"]).to_dict("records")  # type: ignore[no-any-return]


class Disagg(Experiment):
    name = "disagg"
    summary = "Colocated vs disaggregated prefill / decode at equal GPU count."
    description = (
        "Runs the colocated cluster and every split kP+(n-k)D of the same GPUs (agentreplay.features.disagg.disagg: "
        "prefill pool, decode pool, KV moved over the link after prefill) on the trace at each load, and reports JCT "
        "p50 / p90, TTFT p50 / p90 / p99, the prefill instance's token p50 / p90, TPOT p50, throughput, GPU-hours "
        "per 1,000 tasks, KV moved and pool utilisation. Writes disagg.md, rows.json and disagg.png."
    )
    example = "agentreplay fleet disagg --gpus 4 --gpu h100-sxm --out reports/fleet/disagg"
    Params = DisaggParams
    hardware = MappingProxyType({"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 1})
    outputs = ("disagg.md", "disagg.png", "rows.json")

    def configs(self, base: SimConfig, p: DisaggParams) -> dict[str, SimConfig]:
        start = base.replace(
            workload={"max_programs": p.max_programs},
            disagg={"session_home": p.session_home, "link": p.link, "first_token": p.first_token},
        )
        return {label(c): cell_config(start, c) for c in cells_of(base, p)}

    def analyse(self, results: Results, p: DisaggParams) -> dict[str, pd.DataFrame]:
        cells_ = cells_of(results.base, p)
        tables = over_seeds(results, lambda runs: {"disagg": rows_of(runs, cells_, p.gpus)})
        hw = results.base.hardware
        title = (
            f"{hw.model} on {p.gpus}x {hw.gpu} (TP {hw.tp}), {results.trace.name}, session_home={p.session_home}, "
            f"link={p.link}"
        )
        if p.first_token != "decode":
            title += f", first token from {p.first_token}"
        tables["_about"] = about(title=title)
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        import json

        from agentreplay.experiment.results import plain_json

        title, rows = about_of(tables)["title"], _records(tables)
        (out / "disagg.md").write_text(to_markdown(rows, title))
        (out / "rows.json").write_text(json.dumps(plain_json(rows), indent=1) + "\n")
        return [out / "disagg.md", out / "rows.json", plot(rows, out / "disagg.png", title)]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        return [View(about_of(tables)["title"], COLUMNS, text_rows(_records(tables)), left=2)]


EXPERIMENT = Disagg()
