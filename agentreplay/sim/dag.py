"""Fan-out workflows: programs as DAGs (an orchestrator turn spawns sub-agent programs, then joins them).

Semantics (issue 20, "Fan-out"), as Claude Code runs sub-agents (its Agent tool, wire name Task: the parent
"waits for the agent to complete ... then receives the agent's result as a single message"; several Task calls in
one message run in parallel and the parent waits for all; mintlify.com/VineeTagarwaL-code/claude-code/guides/
multi-agent): the spawning turn's LLM call emits the sub-agent calls; each child program arrives when that call
finishes, plus its ``spawn_delay_s``; the parent's next turn is released only when its own tool gap has elapsed
AND every child spawned by that turn has finished (join). Background sub-agents (``run_in_background``) are not
modelled. A child spawned by a program's last turn is not
joined (nothing follows it). The JCT of a workflow is the root's arrival to the last finish of any of its nodes;
per-program JCT stays arrival to last finish. Arrival processes (closed, poisson, trace) apply to roots only; in
closed loop a worker takes the next root when its whole workflow finished.

Shared prefix. A child's prompt starts with ``share_tokens`` of its parent's context at the spawn (the system
prompt plus the base context the orchestrator hands over; :mod:`agentreplay.fanout` chooses it). In the KV
pool this is the parent's own segments: the shared system prefix ``("prefix", id)`` and the parent's history
``("prog", parent)`` (:mod:`agentreplay.kv.segment_pool`), used as a prefix chain (``Request.chain``, the path
block-hash traces take, :mod:`agentreplay.sim.prefix_chain`), so a child on the instance that holds the parent's
history (or a sibling's copy of it) hits it, block by block from the start as vLLM's chained block hashes do
(``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py), and a child elsewhere recomputes it (the first one there
registers it for its siblings). Approximation: a child whose hit stops inside the parent's history marks the
parent's cached blocks beyond it stale (the segment pool keeps each segment a contiguous run), so the parent's
next turn recomputes the spawning turn's tail beyond ``share_tokens`` (its output and anything after it) once.
The cache-aware router sees the family through ``Request.chain_ids`` tags (negative ids, never a block-hash
segment id): a child matches ``share_tokens`` on instances where its parent or a sibling was routed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from agentreplay.engine import PHASE_RELEASE, Engine
from agentreplay.kv.segment_pool import Segment, SegmentPool
from agentreplay.trace.io import TraceError


@dataclass(frozen=True, slots=True, eq=False)
class Dag:
    """Parent links of a workload, by program index (compiled from the trace's schema-3 columns)."""

    parent: np.ndarray  #: int64 [n_programs]: parent program index, -1 for a root
    spawn_turn: np.ndarray  #: int64 [n_programs]: global turn index of the spawning turn, -1 for a root
    spawn_delay_s: np.ndarray  #: float64 [n_programs]: delay from the spawning turn's finish to the arrival
    share_tokens: np.ndarray  #: int64 [n_programs]: leading prompt tokens shared with the parent (0 for roots)

    @property
    def roots(self) -> list[int]:
        return np.flatnonzero(self.parent < 0).tolist()

    def root_of(self) -> np.ndarray:
        """Root program index of every program."""
        root = np.arange(len(self.parent))
        par = self.parent
        for _ in range(len(par)):
            nxt = np.where(par[root] >= 0, par[root], root)
            if (nxt == root).all():
                break
            root = nxt
        return root

    def children(self) -> dict[int, list[int]]:
        """Spawning global turn -> the programs it spawns (in program order)."""
        out: dict[int, list[int]] = {}
        for c in np.flatnonzero(self.parent >= 0).tolist():
            out.setdefault(int(self.spawn_turn[c]), []).append(c)
        return out

    def restrict(self, programs: list[int], old_start: np.ndarray, new_start: np.ndarray) -> Dag | None:
        """The links among ``programs`` (old indices, in their new order) with turns re-addressed; a child whose
        parent is dropped, or whose spawning turn is no longer among its parent's turns, becomes a root."""
        new_of = {p: i for i, p in enumerate(programs)}
        n = len(programs)
        parent = np.full(n, -1, dtype=np.int64)
        turn = np.full(n, -1, dtype=np.int64)
        for i, p in enumerate(programs):
            q = int(self.parent[p])
            if q < 0 or q not in new_of:
                continue
            j = new_of[q]
            local = int(self.spawn_turn[p] - old_start[q])
            if local < int(new_start[j + 1] - new_start[j]):
                parent[i], turn[i] = j, int(new_start[j]) + local
        if (parent < 0).all():
            return None
        idx = np.asarray(programs, dtype=np.int64)
        return Dag(parent, turn, self.spawn_delay_s[idx], np.where(parent >= 0, self.share_tokens[idx], 0))


def build_dag(
    program_ids: list[str],
    parent_ids: list[object],
    parent_turns: list[object],
    delays: list[object],
    turn_start: np.ndarray,
    input_tokens: np.ndarray,
    prefix_tokens: np.ndarray,
) -> Dag | None:
    """Compile the parent links (already validated by :func:`agentreplay.trace.dag_check.validate_links`; a link
    that does not resolve is a :class:`TraceError`). A child shares ``min(parent's prompt at the spawning turn,
    child's smallest prompt)`` tokens, and at least its own shared system prefix."""
    if all(_missing(v) for v in parent_ids):
        return None
    index = {pid: i for i, pid in enumerate(program_ids)}
    n = len(program_ids)
    parent = np.full(n, -1, dtype=np.int64)
    turn = np.full(n, -1, dtype=np.int64)
    delay = np.zeros(n, dtype=np.float64)
    share = np.zeros(n, dtype=np.int64)
    min_input = np.minimum.reduceat(input_tokens, turn_start[:-1]) if len(input_tokens) else np.zeros(n, np.int64)
    for c, (q, t, d) in enumerate(zip(parent_ids, parent_turns, delays, strict=True)):
        if _missing(q):
            continue
        if q not in index or _missing(t):
            raise TraceError(f"programs.parent_program_id = {q!r} for program {program_ids[c]!r} does not resolve")
        j = index[q]  # type: ignore[index]
        local = int(t)  # type: ignore[call-overload]
        if not 0 <= local < int(turn_start[j + 1] - turn_start[j]):
            raise TraceError(f"programs.parent_turn_idx = {local} for program {program_ids[c]!r} out of range")
        parent[c], turn[c] = j, int(turn_start[j]) + local
        delay[c] = 0.0 if _missing(d) else float(d)  # type: ignore[arg-type]
        share[c] = max(int(prefix_tokens[c]), min(int(input_tokens[turn[c]]), int(min_input[c])))
    return Dag(parent, turn, delay, share)


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and v != v)


class FanOut:
    """Run-time join bookkeeping of one simulation (the orchestrator calls it only when the workload has links).

    ``waiting[turn]`` counts what the parent's next turn still waits for after ``turn``: its children not yet
    finished, plus one while its own tool gap runs."""

    def __init__(
        self,
        dag: Dag,
        engine: Engine,
        arrive: Callable[[int], None],
        release: Callable[[int, int], None],
        turn_start: np.ndarray,
        prefix_tokens: np.ndarray,
    ) -> None:
        self.dag = dag
        self.engine = engine
        self.arrive = arrive
        self.release = release
        self.kids = dag.children()
        self.roots = dag.roots
        self.root = dag.root_of().tolist()
        self.parent = dag.parent.tolist()
        self.spawn_turn = dag.spawn_turn.tolist()
        self.delay = dag.spawn_delay_s.tolist()
        self.share = dag.share_tokens.tolist()
        self.last_turn = (turn_start[1:] - 1).tolist()
        self.prefix_tokens = prefix_tokens.tolist()
        self.has_kids = [False] * len(self.parent)
        for q in self.parent:
            if q >= 0:
                self.has_kids[q] = True
        self.waiting: dict[int, int] = {}
        self.outstanding = [0] * len(self.parent)  #: per root: programs of its workflow not yet finished
        self.workflow_finish_s = np.full(len(self.parent), np.nan)  #: per root

    def root_arrived(self, p: int) -> None:
        self.outstanding[p] = 1

    def turn_done(self, turn: int, last: bool) -> None:
        """A call finished: its children arrive after their delays; the parent's next turn now waits on them."""
        kids = self.kids.get(turn)
        if not kids:
            return
        now = self.engine.now
        for c in kids:
            self.engine.at(now + self.delay[c], PHASE_RELEASE, self.arrive, c)
        self.outstanding[self.root[kids[0]]] += len(kids)
        if not last:
            self.waiting[turn] = len(kids) + 1

    def gap_done(self, turn: int) -> bool:
        """The tool gap after ``turn`` elapsed: may the next turn be released now?"""
        w = self.waiting.get(turn)
        if w is None:
            return True
        if w == 1:
            del self.waiting[turn]
            return True
        self.waiting[turn] = w - 1
        return False

    def program_done(self, p: int) -> bool:
        """Program ``p`` finished: join its parent's turn; True when its whole workflow finished."""
        q = self.parent[p]
        if q >= 0:
            t = self.spawn_turn[p]
            w = self.waiting.get(t)
            if w is not None:
                if w == 1:
                    del self.waiting[t]
                    self.release(t + 1, q)
                else:
                    self.waiting[t] = w - 1
        root = self.root[p]
        self.outstanding[root] -= 1
        if self.outstanding[root] == 0:
            self.workflow_finish_s[root] = self.engine.now
            return True
        return False

    def summary(self, arrival_s: np.ndarray) -> dict[str, object]:
        """Workflow counts and workflow JCT (root arrival to the last finish in its workflow) for ``summary.json``."""
        roots = np.asarray(self.roots, dtype=np.int64)
        jct = self.workflow_finish_s[roots] - arrival_s[roots]
        q = np.percentile(jct, [50, 90, 99]).tolist() if len(jct) else [float("nan")] * 3
        return {
            "workflows": len(roots),
            "sub_agents": int((self.dag.parent >= 0).sum()),
            "workflow_jct_s": {"mean": float(jct.mean()), "p50": q[0], "p90": q[1], "p99": q[2]},
        }

    def tag(self, p: int, prompt: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(chain_ids, chain_ends)`` the cache-aware router sees for a call of ``p`` (see the module doc)."""
        ids: list[int] = []
        ends: list[int] = []
        q = self.parent[p]
        if q >= 0:
            ids.append(-(q + 1))
            ends.append(min(self.share[p], prompt))
        if self.has_kids[p]:
            ids.append(-(p + 1))
            ends.append(0)
        return tuple(ids), tuple(ends)

    def segments(self, pool: SegmentPool, p: int, bs: int, prefix_id: object) -> tuple[list[Segment], Segment, int]:
        """``(chain, own history segment, base)`` of a call of child ``p`` on an instance with prefix caching:
        the shared system prefix, then each ancestor's history segment, up to the block ``share_tokens``
        reaches; the child's own history starts there."""
        base = self.share[p] // bs
        chain: list[Segment] = []
        path: list[int] = []
        q = self.parent[p]
        while q >= 0:
            path.append(q)
            q = self.parent[q]
        sys_base = self.prefix_tokens[p] // bs
        root_base = 0
        if prefix_id is not None and sys_base > 0:
            chain.append(pool.segment(("prefix", prefix_id, sys_base), 0))
            root_base = min(sys_base, base)
        for q in reversed(path):  # root first; each history segment starts where its program's prefix ends
            q_base = self.share[q] // bs if self.parent[q] >= 0 else root_base
            if q_base >= base:
                break
            chain.append(pool.segment(("prog", q), q_base))
        return chain, pool.segment(("prog", p), base), base
