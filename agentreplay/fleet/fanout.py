"""Fan-out under routing: sibling prefix sharing captured or lost, and the eviction pressure of sub-agent bursts.

For each router, the fan-out trace (:func:`agentreplay.fanout.fan_out`) and the same root programs without
children are simulated on the same cluster. Per router (definitions, used in the table, JSON and figure):

- ``prefill_tokens``: prompt tokens computed over every call of the fan-out run (input - cached in HBM);
  ``saved_vs_<reference>``: the reference router's ``prefill_tokens`` minus this router's (the prefill that
  cache-aware co-location saves over spreading the siblings);
- ``sibling_hit_rate``: over the children's first calls, tokens of the shared prefix served from cache /
  shared-prefix tokens (``Dag.share_tokens``; a child's first call can hit nothing else);
- ``workflow_jct_p50_s`` / ``p90``: per root, the last finish of any program of its workflow - the root's arrival
  (:mod:`agentreplay.sim.dag`); per-program JCT is unchanged;
- ``others_hit_rate`` vs ``others_hit_rate_no_fanout``: prefix hit rate (cached / prompt tokens) of the root
  programs that spawn nothing, with and without the other programs' sub-agents: the eviction pressure a burst of
  unrelated sub-agents puts on their prefixes; ``others_hit_rate_in_bursts``: the same over their calls released
  while at least one sub-agent was in flight (arrival to finish).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentreplay.fleet.figures import subplots
from agentreplay.sim.config import SimConfig
from agentreplay.sim.dag import Dag
from agentreplay.sim.run import SimResult, simulate
from agentreplay.sim.workload import Workload


@dataclass(frozen=True, slots=True)
class RouterRow:
    router: str
    prefill_tokens: int
    saved_tokens: int  #: reference router's prefill_tokens - this one's
    sibling_hit_rate: float
    workflow_jct_p50_s: float
    workflow_jct_p90_s: float
    root_jct_p50_s_no_fanout: float
    others_hit_rate: float
    others_hit_rate_in_bursts: float
    others_hit_rate_no_fanout: float
    workflow_jct_s: np.ndarray  #: per root (for the figure)


def workflow_jct(res: SimResult, dag: Dag | None) -> np.ndarray:
    """Per root program: last finish over its workflow - the root's arrival (seconds)."""
    p = res.columns("programs")
    assert p is not None
    finish, arrival = np.asarray(p["finish_s"]), np.asarray(p["arrival_s"])
    if dag is None:
        return finish - arrival
    root = dag.root_of()
    last = np.full(len(finish), -np.inf)
    np.maximum.at(last, root, finish)
    roots = np.flatnonzero(dag.parent < 0)
    return last[roots] - arrival[roots]


def _turn_arrays(res: SimResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = res.columns("turns")
    assert t is not None
    return (
        np.asarray(t["input_tokens"], dtype=np.int64),
        np.asarray(t["cached_tokens"], dtype=np.int64),
        np.asarray(t["computed_prompt_tokens"], dtype=np.int64),
    )


def _hit_rate(inp: np.ndarray, cached: np.ndarray, mask: np.ndarray) -> float:
    total = int(inp[mask].sum())
    return float(cached[mask].sum()) / total if total else float("nan")


def measure(router: str, fan: SimResult, w: Workload, base: SimResult, wb: Workload) -> dict[str, Any]:
    """The per-router figures of one fan-out run and its no-fan-out baseline (module docstring)."""
    dag = w.dag
    assert dag is not None
    inp, cached, computed = _turn_arrays(fan)
    start = w.turn_start
    children = np.flatnonzero(dag.parent >= 0)
    first = start[children]
    share = dag.share_tokens[children]
    sib = float(np.minimum(cached[first], share).sum()) / float(share.sum()) if share.sum() else float("nan")
    has_kids = np.zeros(w.n_programs, dtype=bool)
    has_kids[dag.parent[children]] = True
    lonely = np.flatnonzero((dag.parent < 0) & ~has_kids)
    prog_of_turn = np.repeat(np.arange(w.n_programs), np.diff(start))
    mask = np.isin(prog_of_turn, lonely)
    # the same programs in the baseline (roots in the same order: row i of the baseline is root i)
    roots = np.flatnonzero(dag.parent < 0)
    lonely_b = np.flatnonzero(np.isin(roots, lonely))
    binp, bcached, _ = _turn_arrays(base)
    bprog = np.repeat(np.arange(wb.n_programs), np.diff(wb.turn_start))
    wf = workflow_jct(fan, dag)
    bj = workflow_jct(base, None)
    tc, pc = fan.columns("turns"), fan.columns("programs")
    assert tc is not None and pc is not None
    in_burst = _in_intervals(
        np.asarray(tc["release_s"]), np.asarray(pc["arrival_s"])[children], np.asarray(pc["finish_s"])[children]
    )
    return {
        "router": router,
        "prefill_tokens": int(computed.sum()),
        "sibling_hit_rate": sib,
        "workflow_jct_p50_s": float(np.percentile(wf, 50)),
        "workflow_jct_p90_s": float(np.percentile(wf, 90)),
        "root_jct_p50_s_no_fanout": float(np.percentile(bj, 50)),
        "others_hit_rate": _hit_rate(inp, cached, mask),
        "others_hit_rate_in_bursts": _hit_rate(inp, cached, mask & in_burst),
        "others_hit_rate_no_fanout": _hit_rate(binp, bcached, np.isin(bprog, lonely_b)),
        "workflow_jct_s": wf,
    }


def _in_intervals(t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``t`` inside the union of the closed intervals ``[start, end]``."""
    if not len(start):
        return np.zeros(len(t), dtype=bool)
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    k = np.searchsorted(s, t, side="right") - 1  # last interval starting at or before t
    return (k >= 0) & (t <= e[np.maximum(k, 0)])


def roots_only(w: Workload) -> Workload:
    """The workload's root programs alone (the no-fan-out baseline)."""
    dag = w.dag
    if dag is None:
        return w
    roots = np.flatnonzero(dag.parent < 0).tolist()
    start = w.turn_start
    turns = np.concatenate([np.arange(start[p], start[p + 1]) for p in roots])
    counts = np.diff(start)[roots]
    new_start = np.zeros(len(roots) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_start[1:])
    return w.select(roots, turns, new_start, w.output_tokens[turns])  # (no link survives: dag None)


def compare_routers(
    w: Workload, cfg: SimConfig, routers: list[str], reference: str, progress: Any = None, perf: Any = None
) -> list[RouterRow]:
    """Simulate ``w`` (with its fan-out) and its roots alone under each router; rows in ``routers`` order
    (``perf``: an iteration pricer replacing the catalog's, for tests)."""
    if reference not in routers:
        raise ValueError(f"reference router {reference!r} is not among the routers {routers}")
    base_w = roots_only(w)
    raw = []
    for name in routers:
        c = cfg.replace(router={"policy": name})
        if progress is not None:
            progress(name)
        raw.append(measure(name, simulate(w, c, perf=perf), w, simulate(base_w, c, perf=perf), base_w))
    ref = next(r["prefill_tokens"] for r in raw if r["router"] == reference)
    return [RouterRow(saved_tokens=ref - r["prefill_tokens"], **r) for r in raw]


def rows_table(rows: list[RouterRow], reference: str) -> tuple[list[str], list[list[str]]]:
    head = [
        "router",
        "prefill tokens",
        f"saved vs {reference}",
        "sibling hit rate",
        "workflow JCT p50 (s)",
        "workflow JCT p90 (s)",
        "root JCT p50, no fan-out (s)",
        "others' hit rate",
        "... in bursts",
        "others' hit rate, no fan-out",
    ]
    body = [
        [
            r.router,
            f"{r.prefill_tokens:,}",
            f"{r.saved_tokens:,}",
            f"{r.sibling_hit_rate:.3f}",
            f"{r.workflow_jct_p50_s:.1f}",
            f"{r.workflow_jct_p90_s:.1f}",
            f"{r.root_jct_p50_s_no_fanout:.1f}",
            f"{r.others_hit_rate:.3f}",
            f"{r.others_hit_rate_in_bursts:.3f}",
            f"{r.others_hit_rate_no_fanout:.3f}",
        ]
        for r in rows
    ]
    return head, body


def as_json(rows: list[RouterRow]) -> list[dict[str, Any]]:
    return [{k: v for k, v in dataclasses.asdict(r).items() if k != "workflow_jct_s"} for r in rows]


def markdown(title: str, head: list[str], body: list[list[str]], notes: list[str]) -> str:
    lines = [f"# {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join([*lines, "", *notes, ""])


def plot(rows: list[RouterRow], path: Path) -> None:
    """Three panels: prefill tokens and sibling hit rate per router; workflow JCT CDFs; others' hit rate with and
    without fan-out."""

    fig, axes = subplots(1, 3, figsize=(15, 4.2))
    names = [r.router for r in rows]
    x = np.arange(len(rows))
    ax = axes[0]
    ax.bar(x, [r.prefill_tokens / 1e6 for r in rows], color="tab:blue")
    ax.set_xticks(x, names)
    ax.set_ylabel("prefill tokens computed (M)")
    ax2 = ax.twinx()
    ax2.plot(x, [r.sibling_hit_rate for r in rows], "o-", color="tab:red")
    ax2.set_ylim(0, 1.02)
    ax2.set_ylabel("sibling hit rate (red)")
    ax.set_title("prefill and sibling prefix hits")
    ax = axes[1]
    for r in rows:
        v = np.sort(r.workflow_jct_s)
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=r.router)
    ax.set_xscale("log")
    ax.set_xlabel("workflow JCT (s)")
    ax.set_ylabel("share of workflows")
    ax.set_title("workflow JCT (root arrival to last node)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax = axes[2]
    ax.bar(x - 0.27, [r.others_hit_rate_no_fanout for r in rows], 0.27, label="without fan-out")
    ax.bar(x, [r.others_hit_rate for r in rows], 0.27, label="with others' sub-agents")
    ax.bar(x + 0.27, [r.others_hit_rate_in_bursts for r in rows], 0.27, label="... calls during bursts")
    ax.set_xticks(x, names)
    ax.set_ylabel("prefix hit rate")
    ax.set_title("programs without sub-agents")
    ax.legend(loc="upper right", ncol=1, fontsize=8)
    ax.set_ylim(0, 1.45)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
