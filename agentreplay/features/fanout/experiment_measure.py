"""Fan-out under routing, measured: sibling prefix sharing captured or lost, and the eviction pressure of sub-agent
bursts (what ``agentreplay fleet fanout`` reports, :mod:`agentreplay.features.fanout.experiment`).

For each router, the fan-out trace (:func:`agentreplay.fanout.fan_out`) and the same root programs without
children are simulated on the same cluster. Per router (definitions, used in the table, JSON and figure):

- ``prefill_tokens``: prompt tokens computed over every call of the fan-out run (input - cached in HBM);
  ``saved_tokens``: the reference router's ``prefill_tokens`` minus this router's (the prefill that cache-aware
  co-location saves over spreading the siblings);
- ``sibling_hit_rate``: over the children's first calls, tokens of the shared prefix served from cache /
  shared-prefix tokens (``Dag.share_tokens``; a child's first call can hit nothing else);
- ``workflow_jct_p50_s`` / ``p90``: per root, the last finish of any program of its workflow - the root's arrival
  (:mod:`agentreplay.sim.dag`); per-program JCT is unchanged; ``root_jct_p50_s_no_fanout`` / ``p90``: the same
  roots' JCT without children;
- ``others_hit_rate`` vs ``others_hit_rate_no_fanout``: prefix hit rate (cached / prompt tokens) of the root
  programs that spawn nothing, with and without the other programs' sub-agents: the eviction pressure a burst of
  unrelated sub-agents puts on their prefixes; ``others_hit_rate_in_bursts``: the same over their calls released
  while at least one sub-agent was in flight (arrival to finish).

A run is read as its columns (:data:`TURNS`, :data:`PROGRAMS`, rows in the order the run wrote them: the
workload's turn and program order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where it runs: listing the experiments (fleet --help) needs none
    import numpy as np

    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.dag import Dag
    from agentreplay.sim.result import SimResult
    from agentreplay.sim.workload import Workload

TURNS = ["input_tokens", "cached_tokens", "computed_prompt_tokens", "release_s"]
PROGRAMS = ["finish_s", "arrival_s"]
Columns = dict[str, "np.ndarray"]


@dataclass(frozen=True, slots=True)
class RunColumns:
    """What the measurement reads of one run."""

    turns: Columns
    programs: Columns

    @classmethod
    def of(cls, res: SimResult) -> RunColumns:
        import numpy as np

        t, p = res.columns("turns"), res.columns("programs")
        assert t is not None and p is not None
        return cls({c: np.asarray(t[c]) for c in TURNS}, {c: np.asarray(p[c]) for c in PROGRAMS})


@dataclass(frozen=True, slots=True)
class RouterRow:
    """One router's figures (module docstring)."""

    router: str
    prefill_tokens: int
    saved_tokens: int  #: reference router's prefill_tokens - this one's
    sibling_hit_rate: float
    workflow_jct_p50_s: float
    workflow_jct_p90_s: float
    root_jct_p50_s_no_fanout: float
    root_jct_p90_s_no_fanout: float
    others_hit_rate: float
    others_hit_rate_in_bursts: float
    others_hit_rate_no_fanout: float
    workflow_jct_s: np.ndarray  #: per root (for the figure)


def workflow_jct(programs: Columns, dag: Dag | None) -> np.ndarray:
    """Per root program: last finish over its workflow - the root's arrival (seconds)."""
    import numpy as np

    finish, arrival = np.asarray(programs["finish_s"]), np.asarray(programs["arrival_s"])
    if dag is None:
        return finish - arrival
    root = dag.root_of()
    last = np.full(len(finish), -np.inf)
    np.maximum.at(last, root, finish)
    roots = np.flatnonzero(dag.parent < 0)
    return last[roots] - arrival[roots]


def _hit_rate(inp: np.ndarray, cached: np.ndarray, mask: np.ndarray) -> float:
    total = int(inp[mask].sum())
    return float(cached[mask].sum()) / total if total else float("nan")


def measure(router: str, fan: RunColumns, w: Workload, base: RunColumns, wb: Workload) -> dict[str, Any]:
    """The per-router figures of one fan-out run and its no-fan-out baseline (module docstring), and the
    workflow JCTs (``workflow_jct_s``, per root)."""
    import numpy as np

    dag = w.dag
    assert dag is not None
    inp, cached = (np.asarray(fan.turns[c], dtype=np.int64) for c in ("input_tokens", "cached_tokens"))
    computed = np.asarray(fan.turns["computed_prompt_tokens"], dtype=np.int64)
    children = np.flatnonzero(dag.parent >= 0)
    first = w.turn_start[children]
    share = dag.share_tokens[children]
    sib = float(np.minimum(cached[first], share).sum()) / float(share.sum()) if share.sum() else float("nan")
    has_kids = np.zeros(w.n_programs, dtype=bool)
    has_kids[dag.parent[children]] = True
    lonely = np.flatnonzero((dag.parent < 0) & ~has_kids)
    mask = np.isin(np.repeat(np.arange(w.n_programs), np.diff(w.turn_start)), lonely)
    # the same programs in the baseline (roots in the same order: row i of the baseline is root i)
    lonely_b = np.flatnonzero(np.isin(np.flatnonzero(dag.parent < 0), lonely))
    binp, bcached = (np.asarray(base.turns[c], dtype=np.int64) for c in ("input_tokens", "cached_tokens"))
    bprog = np.repeat(np.arange(wb.n_programs), np.diff(wb.turn_start))
    wf = workflow_jct(fan.programs, dag)
    bj = workflow_jct(base.programs, None)
    arrival, finish = np.asarray(fan.programs["arrival_s"]), np.asarray(fan.programs["finish_s"])
    in_burst = _in_intervals(np.asarray(fan.turns["release_s"]), arrival[children], finish[children])
    return {
        "router": router,
        "prefill_tokens": int(computed.sum()),
        "sibling_hit_rate": sib,
        "workflow_jct_p50_s": float(np.percentile(wf, 50)),
        "workflow_jct_p90_s": float(np.percentile(wf, 90)),
        "root_jct_p50_s_no_fanout": float(np.percentile(bj, 50)),
        "root_jct_p90_s_no_fanout": float(np.percentile(bj, 90)),
        "others_hit_rate": _hit_rate(inp, cached, mask),
        "others_hit_rate_in_bursts": _hit_rate(inp, cached, mask & in_burst),
        "others_hit_rate_no_fanout": _hit_rate(binp, bcached, np.isin(bprog, lonely_b)),
        "workflow_jct_s": wf,
    }


def _in_intervals(t: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``t`` inside the union of the closed intervals ``[start, end]``."""
    import numpy as np

    if not len(start):
        return np.zeros(len(t), dtype=bool)
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    k = np.searchsorted(s, t, side="right") - 1  # last interval starting at or before t
    return (k >= 0) & (t <= e[np.maximum(k, 0)])


def roots_only(w: Workload) -> Workload:
    """The workload's root programs alone (the no-fan-out baseline)."""
    import numpy as np

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


def with_savings(raw: list[dict[str, Any]], reference: str) -> list[RouterRow]:
    """Each router's figures with ``saved_tokens``: the reference router's prefill minus its own."""
    ref = next(r["prefill_tokens"] for r in raw if r["router"] == reference)
    return [RouterRow(saved_tokens=ref - r["prefill_tokens"], **r) for r in raw]


def compare_routers(
    w: Workload, cfg: SimConfig, routers: list[str], reference: str, progress: Any = None, perf: Any = None
) -> list[RouterRow]:
    """Simulate ``w`` (with its fan-out) and its roots alone under each router, in this process (``perf``: an
    iteration pricer replacing the catalog's, for tests); one row per router, in ``routers`` order.
    ``agentreplay fleet fanout`` runs the same cells on the experiment runner."""
    from agentreplay.sim.run import simulate

    if reference not in routers:
        raise ValueError(f"reference router {reference!r} is not among the routers {routers}")
    base_w = roots_only(w)
    raw = []
    for name in routers:
        c = cfg.replace(router={"policy": name})
        if progress is not None:
            progress(name)
        fan, base = (RunColumns.of(simulate(x, c, perf=perf)) for x in (w, base_w))
        raw.append(measure(name, fan, w, base, base_w))
    return with_savings(raw, reference)
