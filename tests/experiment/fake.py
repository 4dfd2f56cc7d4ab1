"""A small experiment for the runner's tests: one variant per load, a table of JCTs, a Markdown page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pandas as pd

from agentreplay.experiment import Experiment, Run, about, about_of, over_seeds, param
from agentreplay.experiment.params import check
from agentreplay.sim.config import SimConfig


@dataclass(frozen=True, slots=True)
class FakeParams:
    loads: tuple[int, ...] = param((1, 2), "Programs in flight.")
    fail_at: int | None = param(None, "A load whose cell raises a ValueError.", none="none")

    def __post_init__(self) -> None:
        check(min(self.loads) >= 1, "--loads", self.loads, "integers >= 1")


def rows(runs: dict[str, Run]) -> dict[str, pd.DataFrame]:
    jct = [{"load": int(k.split()[1]), "jct_p50_s": r.summary()["jct_s"]["p50"]} for k, r in runs.items()]
    per_program = pd.concat([r.table("programs")[["program_id", "jct_s"]].assign(variant=k) for k, r in runs.items()])
    return {"jct": pd.DataFrame(jct).set_index("load"), "programs": per_program.reset_index(drop=True)}


class Fake(Experiment):
    name = "fake"
    summary = "A test experiment."
    description = "One variant per load."
    example = "agentreplay fleet fake"
    Params = FakeParams
    hardware = MappingProxyType({})
    outputs = ("fake.md",)

    def configs(self, base: SimConfig, p: FakeParams) -> dict[str, SimConfig]:
        return {f"load {n}": base.replace(workload={"concurrency": n}) for n in p.loads}

    def workload(self, label: str, trace: Path, p: FakeParams, seed: int) -> Any:
        if p.fail_at is not None and label == f"load {p.fail_at}":
            raise ValueError(f"{label}: refused")
        return super().workload(label, trace, p, seed)

    def analyse(self, results: Any, p: FakeParams) -> dict[str, pd.DataFrame]:
        tables = over_seeds(results, rows)
        tables["_about"] = about(title=f"{len(results)} loads")
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        (out / "fake.md").write_text(about_of(tables)["title"] + "\n")
        return [out / "fake.md"]


EXPERIMENT = Fake()
