"""Collector for agent workflows given as DAGs of LLM calls (the AgentServeSim / LLMServingSim DAG workload form).

Native format, as its generator gives it: one workflow per JSON line, ``{"workflow_id": ..., "nodes": [...],
"edges": [{"src": ..., "dst": ..., "delay_ns": ...}]}``; each node is one LLM call ``{"id": ...,
"input_toks": <tokens>, "output_toks": <tokens>}`` (the token field names of LLMServingSim's request datasets,
casys-kaist/LLMServingSim ``dataset/README.md``); an edge says ``dst`` starts ``delay_ns`` after ``src`` finished
(tool or hand-over time); an optional ``"arrival_time_ns"`` on the workflow gives its arrival. The public index
searched (LLMServingSim ``dataset/``, rajibrhasan/agentservesim) holds no file in this form, so the reader follows
the issue's description and the sample in ``tests/collectors/data/dag_workflows.jsonl`` was written by hand.

Mapping onto programs with parent links (schema 3, :mod:`agentreplay.sim.dag`), for the fork-join shapes of an
orchestrator and its sub-agents:

- the one node without predecessors starts the root program; a chain (a node with one successor that has no
  other predecessor) is one program's successive turns, the edge delay its tool gap;
- a node with several successors spawns: each successor with no other predecessor starts a child program
  (``spawn_delay_s`` = the edge delay), followed down its own chain; the node where the children's chains end
  (all its predecessors are the children's last nodes, or the spawning node) is the parent's next turn (the
  join), with tool gap = the delay of a direct spawning-node -> join edge, else 0. Delays of child -> join edges
  are dropped (the join waits for the children's finishes). Children that join nothing end the parent there.
- any other shape (several roots, a join fed by unrelated nodes, a node reached twice) is a bad input naming the
  workflow and the node.

Prompts are taken as append-only within a program (``reused_tokens`` = previous prompt + output, capped).
"""

from __future__ import annotations

from pathlib import Path

from collectors.base import BadInput, CollectResult, frames, per_file, turn_row
from collectors.requests import as_int, as_time, detects, files, jsonl_objects, recogniser, require

FIELDS = ("workflow_id", "nodes", "edges")
_recognise = recogniser(".jsonl", FIELDS)


class _Graph:
    def __init__(self, wf: str, obj: dict, line: int) -> None:
        self.wf = wf
        nodes, edges = obj["nodes"], obj["edges"]
        if not isinstance(nodes, list) or not nodes:
            raise BadInput(f"line {line}: workflow {wf!r}: field 'nodes' = {nodes!r} is not a non-empty list")
        if not isinstance(edges, list):
            raise BadInput(f"line {line}: workflow {wf!r}: field 'edges' = {edges!r} is not a list")
        self.tokens: dict[str, tuple[int, int]] = {}
        for n in nodes:
            if not isinstance(n, dict):
                raise BadInput(f"line {line}: workflow {wf!r}: node {n!r} is not an object")
            require(n, ("id", "input_toks", "output_toks"), line)
            nid = str(n["id"])
            if nid in self.tokens:
                raise BadInput(f"line {line}: workflow {wf!r}: node id {nid!r} repeated")
            self.tokens[nid] = (
                as_int(n["input_toks"], line, "input_toks", minimum=1),
                as_int(n["output_toks"], line, "output_toks"),
            )
        self.succ: dict[str, list[tuple[str, float]]] = {k: [] for k in self.tokens}
        self.pred: dict[str, list[str]] = {k: [] for k in self.tokens}
        for e in edges:
            if not isinstance(e, dict):
                raise BadInput(f"line {line}: workflow {wf!r}: edge {e!r} is not an object")
            require(e, ("src", "dst"), line)
            src, dst = str(e["src"]), str(e["dst"])
            for end, nid in (("src", src), ("dst", dst)):
                if nid not in self.tokens:
                    raise BadInput(f"line {line}: workflow {wf!r}: edge field {end!r} = {nid!r}: no such node")
            self.succ[src].append((dst, as_time(e.get("delay_ns", 0), line, "delay_ns") / 1e9))
            self.pred[dst].append(src)
        roots = [k for k in self.tokens if not self.pred[k]]
        if len(roots) != 1:
            raise BadInput(f"line {line}: workflow {wf!r}: {len(roots)} nodes without predecessors {roots[:5]}, need 1")
        self.root = roots[0]
        self.line = line


def parse_workflow(obj: dict, line: int) -> tuple[list[dict], list[dict]]:
    """Program and turn rows of one workflow (module docstring)."""
    require(obj, FIELDS, line)
    wf = str(obj["workflow_id"])
    g = _Graph(wf, obj, line)
    arrival = as_time(obj["arrival_time_ns"], line, "arrival_time_ns") / 1e9 if "arrival_time_ns" in obj else None
    programs: list[dict] = []
    turns: list[dict] = []
    seen: set[str] = set()

    def bad(node: str, why: str) -> BadInput:
        return BadInput(f"line {line}: workflow {wf!r}: node {node!r}: {why}")

    def walk(start: str, pid: str, parent: tuple[str, int, float] | None, stop_at_join: bool) -> str | None:
        """Follow ``pid``'s turns from ``start``; return the join node its chain ends at (children), if any."""
        rows: list[dict] = []
        slot = len(programs)  # parents before their children
        programs.append({})
        node: str | None = start
        end_join: str | None = None
        while node is not None:
            if node in seen:
                raise bad(node, "reached twice (not a fork-join DAG)")
            seen.add(node)
            inp, out = g.tokens[node]
            prev = rows[-1] if rows else None
            reused = 0 if prev is None else min(prev["input_tokens"] + prev["output_tokens"], inp)
            rows.append(_turn(pid, len(rows), inp, out, reused))
            succ = g.succ[node]
            nxt: str | None = None
            gap = 0.0
            if len(succ) == 1 and len(g.pred[succ[0][0]]) == 1:
                nxt, gap = succ[0]
            elif len(succ) == 1 and stop_at_join:
                end_join = succ[0][0]
            elif succ:
                kids = [(d, delay) for d, delay in succ if len(g.pred[d]) == 1]
                direct = {d: delay for d, delay in succ if len(g.pred[d]) > 1}
                joins = set(direct)
                for d, delay in kids:
                    j = walk(d, f"{pid}/{d}", (pid, len(rows) - 1, delay), True)
                    if j is not None:
                        joins.add(j)
                if len(joins) > 1:
                    raise bad(node, f"its sub-agents join at several nodes {sorted(joins)}")
                if joins:
                    j = joins.pop()
                    nxt, gap = j, direct.get(j, 0.0)
                    other = [q for q in g.pred[j] if q not in seen]
                    if other:
                        raise bad(j, f"joins {node!r}'s sub-agents but also waits on {other[0]!r}")
            if nxt is None:
                break
            rows[-1]["tool_duration_s"] = gap
            rows[-1]["tool_duration_kind"] = "measured"
            rows[-1]["tool_class"] = "other"
            node = nxt
        rows[-1]["tool_class"] = "submit"
        turns.extend(rows)
        programs[slot] = {
            "program_id": pid,
            "source": "dag-workflow",
            "task_id": wf,
            "agent": "dag-workflow",
            "model": "unknown",
            "n_turns": len(rows),
            "resolved": None,
            "arrival_s": arrival if parent is None else None,
            "shared_prefix_id": None,
            "shared_prefix_tokens": 0,
            "parent_program_id": None if parent is None else parent[0],
            "parent_turn_idx": None if parent is None else parent[1],
            "spawn_delay_s": None if parent is None else parent[2],
        }
        return end_join

    walk(g.root, wf, None, False)
    missing = [k for k in g.tokens if k not in seen]
    if missing:
        raise bad(missing[0], "not reached from the root along chains and fork-joins")
    return programs, turns


def _turn(pid: str, t: int, inp: int, out: int, reused: int) -> dict:
    return turn_row(
        program_id=pid,
        turn_idx=t,
        input_tokens=inp,
        output_tokens=out,
        reused_tokens=reused,
        tokens_kind="exact",
        tool_class="other",
    )


def parse_file(path: Path) -> tuple[list[dict], list[dict]]:
    programs: list[dict] = []
    turns: list[dict] = []
    for line, obj in jsonl_objects(path):
        p, t = parse_workflow(obj, line)
        programs.extend(p)
        turns.extend(t)
    if not programs:
        raise BadInput("no workflows")
    return programs, turns


class DagWorkflowCollector:
    name = "dag-workflow"
    description = "agent workflows as DAGs of LLM calls (JSONL: workflow_id, nodes, edges with delay_ns)"

    def detect(self, path: Path) -> bool:
        return detects(path, ".jsonl", _recognise)

    def collect(self, path: Path) -> CollectResult:
        result = CollectResult(frames([], []), self.name)
        programs: list[dict] = []
        turns: list[dict] = []
        for _, (p, t) in per_file(files(path, ".jsonl", _recognise), parse_file, result.skips):
            result.files_read += 1
            programs.extend(p)
            turns.extend(t)
        result.trace = frames(programs, turns)
        return result
