"""Replica failures on a trace: the failover ledger and the JCT impact by program age, with and without the
age-aware remedy (``agentreplay fleet failover``).

The same trace and cluster run three times (no failure; the failures; the failures with the age-aware remedy), the
failover ledgers (:mod:`agentreplay.features.failover.failover`) are joined with the no-failure run's JCT, and the
JCT impact is grouped by program age. Compute first (:func:`study_of`, :func:`by_age`, :func:`run_summary`), draw
second (:func:`plot_impact`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from agentreplay.experiment import Experiment, View, about, about_of, over_seeds, param
from agentreplay.experiment.params import check
from agentreplay.experiment.tables import flat
from agentreplay.experiment.tables import markdown as md_table

if TYPE_CHECKING:  # numpy is imported where it runs: listing the experiments (fleet --help) needs none
    import numpy as np
    import pandas as pd

    from agentreplay.experiment import Results, Run
    from agentreplay.sim.config import SimConfig

#: program age at the event, in turns done: bucket edges (left-closed) and labels
AGE_EDGES = (0, 10, 20, 40)
AGE_LABELS = ("0-9", "10-19", "20-39", "40+")
RUNS = ("baseline", "failure", "remedy")


@dataclass
class FailoverStudy:
    """The three runs' program JCTs, the two ledgers (with ``jct_base_s`` and ``jct_delta_s``) and summaries."""

    jct: pd.DataFrame  #: program_id -> jct_s of each run (columns RUNS)
    ledgers: dict[str, pd.DataFrame]  #: "failure" / "remedy" -> ledger rows
    summaries: dict[str, dict[str, Any]]  #: run -> its simulation summary


def study_configs(base: SimConfig, events: list[dict[str, Any]]) -> dict[str, SimConfig]:
    """Baseline (failures off), failure (``events``, router placement, the base victim) and remedy (``events``,
    age-aware placement, the ``youngest-first`` victim)."""
    return {
        "baseline": base.replace(failures={"events": [], "mtbf_s": 0.0}),
        "failure": base.replace(failures={"events": events, "placement": "router"}),
        "remedy": base.replace(
            failures={"events": events, "placement": "age-aware"}, policy={"victim": "youngest-first"}
        ),
    }


def study_of(runs: dict[str, Run]) -> FailoverStudy:
    """The three runs' program JCTs, their ledgers joined with the no-failure run's JCT, and their summaries."""
    import pandas as pd

    frame = pd.DataFrame({name: runs[name].table("programs").set_index("program_id")["jct_s"] for name in RUNS})
    ledgers = {name: runs[name].table("failover") for name in RUNS[1:]}
    for led in ledgers.values():
        led["jct_base_s"] = frame["baseline"].loc[led["program_id"]].to_numpy()
        led["jct_delta_s"] = led["jct_s"] - led["jct_base_s"]
        led["age_bucket"] = age_bucket(led["turns_done"].to_numpy())
    return FailoverStudy(frame, ledgers, {name: runs[name].summary() for name in RUNS})


def age_bucket(turns_done: np.ndarray) -> np.ndarray:
    import numpy as np

    idx = np.searchsorted(np.asarray(AGE_EDGES), turns_done, side="right") - 1
    return np.asarray(AGE_LABELS, dtype=object)[np.clip(idx, 0, len(AGE_LABELS) - 1)]


def by_age(study: FailoverStudy) -> pd.DataFrame:
    """One row per age bucket (of the programs the failure run affected, by their age at the first event that
    hit them): programs, re-prefilled tokens, and the mean and p90 JCT of those programs in the three runs."""
    import pandas as pd

    rows = []
    led = study.ledgers["failure"]
    first = led.drop_duplicates("program_id")
    rem = study.ledgers["remedy"]
    for label in (*AGE_LABELS, "all"):
        sel = first if label == "all" else first[first["age_bucket"] == label]
        ids = sel["program_id"].tolist()
        j = study.jct.loc[ids] if ids else study.jct.iloc[:0]
        rows.append(
            {
                "age_turns": label,
                "programs": len(ids),
                "reprefill_failure": int(led.loc[led["program_id"].isin(ids), "reprefill_tokens"].clip(lower=0).sum()),
                "reprefill_remedy": int(rem.loc[rem["program_id"].isin(ids), "reprefill_tokens"].clip(lower=0).sum()),
                "jct_baseline_s": float(j["baseline"].mean()) if ids else float("nan"),
                "jct_failure_s": float(j["failure"].mean()) if ids else float("nan"),
                "jct_remedy_s": float(j["remedy"].mean()) if ids else float("nan"),
                **{f"jct_p90_{r}_s": float(j[r].quantile(0.9)) if ids else float("nan") for r in RUNS},
            }
        )
    out = pd.DataFrame(rows)
    out["delta_failure_s"] = out["jct_failure_s"] - out["jct_baseline_s"]
    out["delta_remedy_s"] = out["jct_remedy_s"] - out["jct_baseline_s"]
    return out.set_index("age_turns")


def run_summary(study: FailoverStudy) -> pd.DataFrame:
    """One row per run: JCT mean / p90 over every program, preemptions, and the ledger totals."""
    import pandas as pd

    rows = []
    for name in RUNS:
        s = study.summaries[name]
        fo = s.get("failover", {})
        j = study.jct[name]
        rows.append(
            {
                "run": name,
                "jct_mean_s": float(j.mean()),
                "jct_p90_s": float(j.quantile(0.9)),
                "preemptions": int(s.get("preemptions", 0)),
                "programs_affected": int(fo.get("programs_affected", 0)),
                "aborted_calls": int(fo.get("aborted_calls", 0)),
                "reprefill_tokens": int(fo.get("reprefill_tokens", 0)),
                "lost_output_tokens": int(fo.get("lost_output_tokens", 0)),
            }
        )
    return pd.DataFrame(rows).set_index("run")


def plot_impact(ax_bars: Any, ax_scatter: Any, tables: dict[str, pd.DataFrame]) -> tuple[Any, Any]:
    """Left: mean JCT of the affected programs by age bucket, three runs. Right: each affected program's JCT
    change vs the no-failure run against its age (turns done) at the event, failure and remedy."""
    import numpy as np

    t = flat(tables["by_age"])
    t = t[t["age_turns"] != "all"]
    x = np.arange(len(t))
    for k, (name, col) in enumerate(
        (("no failure", "jct_baseline_s"), ("failure", "jct_failure_s"), ("failure + remedy", "jct_remedy_s"))
    ):
        ax_bars.bar(x + (k - 1) * 0.27, t[col], width=0.27, label=name)
    ax_bars.set_xticks(x, [f"{a}\n(n={n:g})" for a, n in zip(t["age_turns"], t["programs"], strict=True)])
    ax_bars.set_xlabel("program age at the failure (turns done)")
    ax_bars.set_ylabel("mean JCT of the affected programs (s)")
    ax_bars.set_title("JCT of the programs a failure hit")
    ax_bars.grid(alpha=0.3, axis="y")
    ax_bars.legend()
    for name, marker in (("failure", "o"), ("remedy", "s")):
        led = tables[f"ledger_{name}"]
        led = led.drop_duplicates(["seed", "program_id"] if "seed" in led.columns else "program_id")
        label = "failure" if name == "failure" else "failure + remedy"
        ax_scatter.scatter(led["turns_done"], led["jct_delta_s"], marker=marker, alpha=0.6, label=label)
    ax_scatter.axhline(0, color="grey", lw=0.8)
    ax_scatter.set_xlabel("program age at the failure (turns done)")
    ax_scatter.set_ylabel("JCT - JCT without failure (s)")
    ax_scatter.set_title("JCT impact per affected program")
    ax_scatter.grid(alpha=0.3)
    ax_scatter.legend()
    return ax_bars, ax_scatter


def write_figure(path: Path, tables: dict[str, pd.DataFrame]) -> Path:
    from agentreplay.fleet.figures import save, subplots

    fig, (a, b) = subplots(1, 2, figsize=(12, 4.5))
    plot_impact(a, b, tables)
    return save(fig, path)


def markdown(table: pd.DataFrame, runs: pd.DataFrame, setting: str) -> str:
    """The two tables as Markdown, with the setting they came from."""

    def md(df: pd.DataFrame) -> str:
        return md_table(list(df.columns), [[_fmt(v) for v in row] for row in df.itertuples(index=False, name=None)])

    return (
        f"# Failover: JCT impact by program age\n\n{setting}\n\n{_READING}\n\n## Runs\n\n{md(flat(runs))}\n"
        f"## Programs the failures hit, by age at the first hit\n\n{md(flat(table))}"
    )


_READING = (
    "Runs: `baseline` without failures; `failure` with them (aborted calls retried through the router, the "
    "failed instance's KV lost); `remedy` with them plus age-aware placement (re-routed programs oldest first, "
    "each to the least-loaded survivor with room for its prompt) and the `youngest-first` preemption victim. The "
    "age table groups the programs the `failure` run's events hit (age = turns done at the first hit) and shows "
    "their mean and p90 JCT in all three runs; `reprefill_*` = context tokens computed again because of a failure "
    "(`min(KV lost, prompt - cached)` of the re-routed call), for those programs in each run. The remedy run's "
    "events hit a partly different set of programs (its timeline differs once preemptions differ)."
)


def _fmt(v: Any) -> str:
    import numpy as np

    if isinstance(v, float):
        return "" if v != v else f"{v:,.1f}"
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    return str(v)


@dataclass(frozen=True, slots=True)
class FailoverParams:
    instances: int = param(4, "Instances in the cluster.")
    concurrency: int = param(64, "Programs in flight (closed loop).")
    router: str = param("session-affinity", "Router policy (agentreplay simulate --router).")
    num_gpu_blocks: int = param(
        16_000,
        "KV blocks per instance (16 tokens each); 16,000 (256k tokens) makes the survivors memory-bound after a "
        "failure, where preemption choices matter. 0 = the memory model's count.",
    )
    fail_at: tuple[float, ...] = param((600.0, 1500.0, 2400.0), "Failure times, seconds, comma-separated.")
    fail_instance: tuple[int, ...] | None = param(
        None, "Instance of each --fail-at, in order (cycled), comma-separated.", none="1, 2, 3, ..."
    )
    kind: Literal["fail", "drain"] = param("fail", "fail (lose everything at once) or drain (finish, then go down).")
    recover_after: float = param(300.0, "Seconds until a failed instance is back, empty (negative: never).")
    max_programs: int | None = param(None, "Replay only the first N programs of the trace.", none="all")

    def __post_init__(self) -> None:
        check(self.instances >= 2, "--instances", self.instances, "at least 2 (a survivor takes the programs)")
        check(self.concurrency >= 1, "--concurrency", self.concurrency, "an integer >= 1")
        check(self.num_gpu_blocks >= 0, "--num-gpu-blocks", self.num_gpu_blocks, ">= 0 (0: the memory model's)")
        check(bool(self.fail_at) and min(self.fail_at) >= 0, "--fail-at", self.fail_at, "times >= 0 s")
        check(self.max_programs is None or self.max_programs >= 1, "--max-programs", self.max_programs, ">= 1")

    def events(self) -> list[dict[str, Any]]:
        """The ``[failures] events`` of the failure and remedy runs."""
        which = self.fail_instance or [1 + k % max(1, self.instances - 1) for k in range(len(self.fail_at))]
        back = {"recover_after_s": self.recover_after} if self.recover_after >= 0 else {}
        return [
            {"instance": which[k % len(which)], "at_s": t, "kind": self.kind, **back}
            for k, t in enumerate(self.fail_at)
        ]


def tables_of(runs: dict[str, Run]) -> dict[str, pd.DataFrame]:
    study = study_of(runs)
    return {
        "runs": run_summary(study),
        "by_age": by_age(study),
        "ledger_failure": study.ledgers["failure"],
        "ledger_remedy": study.ledgers["remedy"],
    }


def _text(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    f = flat(df)
    rows = [
        ["-" if isinstance(v, float) and v != v else _fmt(v) for v in r] for r in f.itertuples(index=False, name=None)
    ]
    return [str(c) for c in f.columns], rows


class Failover(Experiment):
    name = "failover"
    summary = "Replica failures: the failover ledger and JCT impact by program age, with and without the remedy."
    description = (
        "Runs the trace three times on the same cluster: no failure; the failures (each instance loses its GPU at its "
        "time: running and waiting calls are retried through the router and re-prefill, programs homed there lose "
        "their cached KV); and the failures with the remedy (re-routed programs placed oldest first on the "
        "least-loaded survivor with room, and the youngest-first preemption victim). Reports the JCT of the affected "
        "programs by age (turns done at the failure) in the three runs; writes failover.md, the ledgers "
        "(ledger_failure.parquet, ledger_remedy.parquet), summary.json and jct_by_age.png."
    )
    example = "agentreplay fleet failover --fail-at 600 --fail-instance 1 --out reports/fleet/failover"
    Params = FailoverParams
    hardware = MappingProxyType({"gpu": "h100-sxm", "model": "llama-3.1-8b"})
    outputs = ("failover.md", "jct_by_age.png", "summary.json", "ledger_*.parquet")

    def configs(self, base: SimConfig, p: FailoverParams) -> dict[str, SimConfig]:
        start = base.replace(
            hardware={"instances": p.instances},
            workload={"concurrency": p.concurrency, "max_programs": p.max_programs},
            router={"policy": p.router},
            cache={"num_gpu_blocks": p.num_gpu_blocks or None},
        )
        return study_configs(start, p.events())

    def analyse(self, results: Results, p: FailoverParams) -> dict[str, pd.DataFrame]:
        tables = over_seeds(results, tables_of)
        hw = results.base.hardware
        events = p.events()
        setting = (
            f"{p.instances} x {hw.model} on {hw.gpu}, {p.concurrency} programs in flight, router {p.router}, "
            f"{p.num_gpu_blocks or 'memory-model'} KV blocks per instance; events: "
            + ", ".join(f"instance {e['instance']} {e['kind']} at {e['at_s']:g} s" for e in events)
            + (f", back after {p.recover_after:g} s" if p.recover_after >= 0 else ", never back")
            + (f"; mean over seeds {', '.join(map(str, results.seeds))}" if len(results.seeds) > 1 else "")
        )
        tables["_about"] = about(setting=setting, events=events)
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        import json

        from agentreplay.experiment.results import plain_json

        a = about_of(tables)
        (out / "failover.md").write_text(markdown(tables["by_age"], tables["runs"], a["setting"]))
        doc = {"setting": a["setting"], "events": a["events"], "runs": flat(tables["runs"]).to_dict("records")}
        (out / "summary.json").write_text(json.dumps(plain_json(doc), indent=2) + "\n")
        return [out / "failover.md", out / "summary.json", write_figure(out / "jct_by_age.png", tables)]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        by_age = "programs the failures hit, by age at the first hit (JCT in seconds)"
        return [
            View("runs", *_text(tables["runs"]), notes=[about_of(tables)["setting"]]),
            View(by_age, *_text(tables["by_age"])),
        ]


EXPERIMENT = Failover()
