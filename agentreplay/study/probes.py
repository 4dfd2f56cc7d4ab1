"""Mechanism probes: a few cells rerun with the decision log on, to say *why* a result goes the way it does.

A probe reads the JSONL decision log (``policy.decision_log``; the same records ``agentreplay simulate
--decision-log`` writes): every retention decision (pin with a TTL, release, drop, offload, and its reason),
and joins each pin to the tool gap that followed (``turns.tool_s``) to count the pins that expired before the tool
returned. Re-prefills are the simulator's ``recomputed_tokens`` (prompt tokens computed again that were cached
once); queueing is ``queued_mean_s``.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.sim.config import SimConfig, from_dict
from agentreplay.sim.run import simulate
from agentreplay.sim.workload import Workload, compile_trace
from agentreplay.study.experiments import TOOL_SCALES, base_config
from agentreplay.study.spec import POLICIES, StudyOptions, tool_s_per_program
from agentreplay.trace.io import read_trace

#: Arrival rates (programs per second) the study's report probes the tool-scale cells at.
PROBE_RATES: Final = (0.05, 0.1)
PROBE_POLICIES = ("vllm", "continuum", "continuum-nocap", "continuum-strict", "vllm+program-fcfs", "vllm+continuum-ttl")


def to_dict(cfg: SimConfig) -> dict[str, Any]:
    """A config in TOML layout (what a sweep cell holds)."""
    return {**cfg.to_dict(), "seed": cfg.seed}


def probe_config(programs: int, policy: str, scale: float, seed: int, rate_per_s: float = 0.1) -> SimConfig:
    """The tool-scale experiment's cell for ``policy`` at ``scale`` and ``rate_per_s``, with the decision log."""
    cfg = from_dict({**base_config(programs), "seed": seed})
    sections: dict[str, dict[str, Any]] = {}
    for path, value in POLICIES[policy].items():
        section, name = path.split(".")
        sections.setdefault(section, {})[name] = value
    sections["policy"]["decision_log"] = True
    return cfg.replace(workload={"rate_per_s": rate_per_s}, tools={"mode": "scale", "scale": scale}, **sections)


def retention_breakdown(decisions: list[dict[str, Any]], turns: pd.DataFrame, program_ids: list[str]) -> dict[str, Any]:
    """Counts of the retention decisions of one run, and how the pins fared against the gaps that followed."""
    rows = [d for d in decisions if d.get("event") == "retention"]
    if not rows:
        return {"decisions": 0}
    df = pd.DataFrame(rows)
    reason = df["reason"].fillna("")
    pins = df[df["action"] == "pin"].copy()
    gaps = turns.set_index(["program_id", "turn_idx"])["tool_s"]
    keys = list(zip([program_ids[p] for p in pins["program"]], pins["turn"], strict=True))
    pins["gap_s"] = (
        gaps.reindex(pd.MultiIndex.from_tuples(keys, names=["program_id", "turn_idx"])).to_numpy()
        if keys
        else np.array([])
    )
    n = len(df)
    return {
        "decisions": n,
        "pin_share": len(pins) / n,
        "release_above_cap_share": float(reason.str.contains("above cap").sum()) / n,
        "release_few_obs_share": float(reason.str.contains("too few").sum()) / n,
        "release_other_share": float(((df["action"] != "pin") & ~reason.str.contains("above cap|too few")).sum()) / n,
        "pin_ttl_mean_s": float(pins["ttl_s"].mean()) if len(pins) else float("nan"),
        "pins_expired_share": float((pins["gap_s"] > pins["ttl_s"]).mean()) if len(pins) else float("nan"),
    }


def probe_tool_scale(
    workload: Workload,
    opts: StudyOptions,
    scales: list[float] | None = None,
    policies: tuple[str, ...] = PROBE_POLICIES,
    rate_per_s: float = 0.1,
) -> pd.DataFrame:
    """One row per (policy, scale): JCT (and JCT less the program's tool time), hit rate, re-prefilled tokens,
    queueing, pins and their fate (seed = the study's first seed)."""
    out = []
    for scale in scales or TOOL_SCALES:
        for policy in policies:
            cfg = probe_config(opts.programs, policy, scale, opts.seeds[0], rate_per_s)
            res = simulate(workload, cfg)
            s = res.summary
            row = {
                "policy": policy,
                "rate_per_s": rate_per_s,
                "seed": cfg.seed,
                "tool_scale": scale,
                "jct_mean_s": s["jct_s"]["mean"],
                "jct_serving_mean_s": s["jct_s"]["mean"] - tool_s_per_program(workload, to_dict(cfg)),
                "jct_p99_s": s["jct_s"]["p99"],
                "prefix_hit_rate": s["prefix_hit_rate"],
                "recomputed_tokens": s["recomputed_tokens"],
                "queued_mean_s": s["queued_s"]["mean"],
                "preemptions": s["preemptions"],
                "unpins_on_pressure": s["unpins_on_pressure"],
                "pinned_block_s": s["pinned_block_s"],
                "tool_s_mean": float(np.nanmean(res.turns["tool_s"].to_numpy(dtype=float))),
            }
            row.update(retention_breakdown(res.decisions or [], res.turns, workload.program_ids))
            out.append(row)
    return pd.DataFrame(out)


def probe_study(
    opts: StudyOptions, rates: tuple[float, ...] = PROBE_RATES, scales: list[float] | None = None
) -> pd.DataFrame:
    """The probes of the study's report: :func:`probe_tool_scale` on the study's trace (``opts.trace``) at every
    rate of ``rates`` (programs per second) and tool scale of ``scales`` (default: the tool-scale experiment's),
    one frame, rows in rate order."""
    workload = compile_trace(read_trace(opts.trace))
    return pd.concat([probe_tool_scale(workload, opts, scales, rate_per_s=r) for r in rates], ignore_index=True)
