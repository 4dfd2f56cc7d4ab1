"""Per-session cache health: each program's prefix-hit share by step, and the steps where it collapses, with cause.

Two per-turn shares, both from the prompt tokens found in the instance's HBM prefix cache at the turn's first
admission (``cached_tokens``, recorded by ``agentreplay.scheduler.scheduler.Scheduler``):

- ``hit_share = cached_tokens / input_tokens``: the run's prefix hit rate, per turn (DESIGN §4 metric).
- ``reuse_hit = cached_tokens / reusable_tokens``: the share of what the turn *could* have hit that it did.
  ``reusable_tokens`` = the tokens extending the previous turn's context (the trace's ``reused_tokens`` times the
  run's ``reuse_scale`` when the trace is given, else ``min(I_t, I_{t-1} + O_{t-1})``: append-only context);
  NaN on a program's first turn and where fewer than one KV block is reusable. A turn whose prompt grew a lot
  has a low ``hit_share`` with a healthy cache; ``reuse_hit`` does not move with growth, so collapses are defined
  on it. (Without the trace, a context the agent rewrote looks like a collapse: give the trace.)
- Tokens reloaded from DRAM / CXL / another instance are counted apart (``reload_share`` of the prompt).

Collapse: turn ``t >= 1`` of a program collapses when the previous turn's ``reuse_hit`` was at least ``above``
(default 0.8: the session was served from cache) and turn ``t``'s is below ``below`` (default 0.5: most of what
it could reuse is computed again); the earliest collapse is therefore at step 3. The cause is the first of these
that holds (what the outputs can tell):

0. ``replica fail`` / ``replica drain``: the failover ledger of a run with ``[failures]``
   (``failover.parquet``, :mod:`agentreplay.features.failover.failover`) lists this call: its instance failed (or
   was drained) while the call ran or waited there, or while the program was in a tool call with its KV there.
1. ``routing miss``: the turn ran on another instance than the previous turn.
2. ``reload from lower tier``: part of the prompt came back from DRAM / CXL / another instance.
3. With ``decisions.jsonl`` (``simulate --decision-log``), the retention decision logged when the previous turn
   finished (``agentreplay.sim.instance.Instance``, event ``retention``): ``drop`` -> ``dropped at tool gap``;
   ``pin`` with the idle time (tool gap + queueing) longer than its ``ttl_s`` -> ``TTL expiry while idle``,
   shorter -> ``evicted while pinned (unpinned under pressure)``; ``offload`` -> ``offloaded, lost from host
   tier``; ``release`` (the LRU free list, vLLM's prefix cache) -> ``evicted while idle (LRU)``.
4. ``preemption``: the turn or the previous one was preempted (memory pressure), without a decision log.
5. Otherwise ``unknown: run with --decision-log``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from agentreplay.fleet.goodput import bin_order, step_bin
from agentreplay.fleet.outputs import reusable_tokens

UNKNOWN = "unknown: run with --decision-log"


@dataclass(frozen=True, slots=True)
class Collapse:
    """Thresholds of a collapse (module docstring); shares in [0, 1]."""

    above: float = 0.8  #: previous turn's hit share at least this
    below: float = 0.5  #: this turn's hit share below this

    def __post_init__(self) -> None:
        if not 0 <= self.below <= self.above <= 1:
            raise ValueError(
                f"collapse thresholds below={self.below}, above={self.above}: need 0 <= below <= above <= 1"
            )


def turn_health(turns: pd.DataFrame, reused_tokens: np.ndarray | None = None, block_size: int = 16) -> pd.DataFrame:
    """Per turn: step (1-based), hit_share, reuse_hit, reload_share, instance, moved (instance changed), idle_s
    (the previous turn's finish to this turn's first scheduling: tool gap plus queueing)."""
    inp = turns["input_tokens"].to_numpy(float)
    reusable = reusable_tokens(turns, reused_tokens)
    reload = turns["reloaded_dram_tokens"] + turns["reloaded_cxl_tokens"] + turns["reloaded_remote_tokens"]
    first = (turns["program_id"] != turns["program_id"].shift()).to_numpy()
    inst = turns["instance"].to_numpy(np.int64)
    prev_inst = np.r_[-1, inst[:-1]]
    prev_finish = np.r_[np.nan, turns["finish_s"].to_numpy(float)[:-1]]
    start = turns["release_s"].to_numpy(float) + turns["queued_s"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        hit = np.where(inp > 0, turns["cached_tokens"].to_numpy(float) / inp, np.nan)
        rel = np.where(inp > 0, reload.to_numpy(float) / inp, np.nan)
        reuse_hit = np.where(
            reusable >= block_size, np.minimum(turns["cached_tokens"].to_numpy(float) / reusable, 1.0), np.nan
        )
    return pd.DataFrame(
        {
            "program_id": turns["program_id"].to_numpy(),
            "turn_idx": turns["turn_idx"].to_numpy(),
            "step": turns["turn_idx"].to_numpy() + 1,
            "instance": inst,
            "reusable_tokens": reusable,
            "hit_share": hit,
            "reuse_hit": reuse_hit,
            "reload_share": rel,
            "moved": ~first & (inst != prev_inst),
            "idle_s": np.where(first, np.nan, start - prev_finish),
            "preemptions": turns["preemptions"].to_numpy(),
            "first": first,
        }
    )


def health_by_step(health: pd.DataFrame, th: Collapse) -> pd.DataFrame:
    """Per step bin: turns, mean hit share (of the prompt), mean / p10 / p50 / p90 ``reuse_hit`` and the share of
    turns with ``reuse_hit`` below ``th.below`` (over turns where it is defined)."""
    df = health.assign(bin=step_bin(health["step"].to_numpy()), low=(health["reuse_hit"] < th.below).astype(float))
    df.loc[health["reuse_hit"].isna(), "low"] = np.nan
    g = df.groupby("bin", sort=False)
    r = g["reuse_hit"]
    res = pd.DataFrame(
        {
            "turns": g.size(),
            "hit_share_mean": g["hit_share"].mean(),
            "reuse_hit_mean": r.mean(),
            "reuse_hit_p10": r.quantile(0.1),
            "reuse_hit_p50": r.quantile(0.5),
            "reuse_hit_p90": r.quantile(0.9),
            "share_below": g["low"].mean(),
        }
    ).reset_index()
    res = res.rename(columns={"bin": "step"})
    return res.sort_values("step", key=bin_order, kind="stable").reset_index(drop=True)


def _retention_cause(action: object, ttl_s: float, idle_s: float) -> str:
    if action == "drop":
        return "dropped at tool gap"
    if action == "pin":
        return "TTL expiry while idle" if idle_s > ttl_s else "evicted while pinned (unpinned under pressure)"
    if action == "offload":
        return "offloaded, lost from host tier"
    if action == "release":
        return "evicted while idle (LRU)"
    return "evicted (no retention decision logged)"


def collapses(
    health: pd.DataFrame,
    th: Collapse,
    decisions: pd.DataFrame | None = None,
    failover: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per collapse (module docstring): program_id, step, prev_reuse_hit, reuse_hit, hit_share, cause,
    instances, idle_s, preemptions, reload_share, retention (the logged action, or "" without a log).
    ``failover``: the run's failover ledger (program_id, turn = the call's turn index, event)."""
    hit = health["reuse_hit"].to_numpy(float)
    prev = np.r_[np.nan, hit[:-1]]
    first = health["first"].to_numpy(bool)
    pre = health["preemptions"].to_numpy()
    prev_pre = np.r_[0, pre[:-1]]
    mask = ~first & (prev >= th.above) & (hit < th.below)
    idx = np.flatnonzero(mask)
    retention: dict[tuple[str, int], tuple[object, float]] = {}
    if decisions is not None and len(decisions) and "action" in decisions.columns:
        r = decisions[decisions["event"] == "retention"]
        for pid, turn, act, ttl in zip(r["program_id"], r["turn"], r["action"], r["ttl_s"], strict=True):
            retention[(pid, int(turn))] = (act, float(ttl))
    failed: dict[tuple[str, int], str] = {}
    if failover is not None:
        for pid, turn, event in zip(failover["program_id"], failover["turn"], failover["event"], strict=True):
            failed.setdefault((str(pid), int(turn)), f"replica {event}")
    rows = []
    inst = health["instance"].to_numpy()
    for i in idx:
        pid, turn = health["program_id"].iat[i], int(health["turn_idx"].iat[i])
        action: object = ""
        if (str(pid), turn) in failed:
            cause = failed[(str(pid), turn)]
        elif health["moved"].iat[i]:
            cause = "routing miss"
        elif health["reload_share"].iat[i] > 0:
            cause = "reload from lower tier"
        elif decisions is not None:
            action, ttl = retention.get((pid, turn - 1), ("", float("inf")))
            cause = _retention_cause(action, ttl, float(health["idle_s"].iat[i]))
        elif pre[i] > 0 or prev_pre[i] > 0:
            cause = "preemption"
        else:
            cause = UNKNOWN
        rows.append(
            {
                "program_id": pid,
                "step": turn + 1,
                "prev_reuse_hit": prev[i],
                "reuse_hit": hit[i],
                "hit_share": float(health["hit_share"].iat[i]),
                "cause": cause,
                "instance_before": int(inst[i - 1]),
                "instance": int(inst[i]),
                "idle_s": float(health["idle_s"].iat[i]),
                "preemptions": int(pre[i] + prev_pre[i]),
                "reload_share": float(health["reload_share"].iat[i]),
                "retention": str(action),
            }
        )
    cols = [
        "program_id",
        "step",
        "prev_reuse_hit",
        "reuse_hit",
        "hit_share",
        "cause",
        "instance_before",
        "instance",
        "idle_s",
        "preemptions",
        "reload_share",
        "retention",
    ]
    return pd.DataFrame(rows, columns=cols)


def collapsed_programs(events: pd.DataFrame) -> pd.DataFrame:
    """Per program with at least one collapse: collapses, first collapse step and its cause, all causes."""
    if events.empty:
        return pd.DataFrame(columns=["program_id", "collapses", "first_step", "first_cause", "causes"])
    g = events.groupby("program_id", sort=False)
    res = pd.DataFrame(
        {
            "collapses": g.size(),
            "first_step": g["step"].first(),
            "first_cause": g["cause"].first(),
            "causes": g["cause"].agg(lambda s: ", ".join(sorted(set(s)))),
        }
    ).reset_index()
    return res.sort_values(["first_step", "program_id"], kind="stable").reset_index(drop=True)
