"""Priority classes and deadlines, set up before a run (``[classes]``, ``[admission] policy = "deadline"``).

- :func:`assign_classes`: each program's class rank (0 interactive, 1 background, 2 batch), from the trace's
  ``programs`` column ``[classes] column`` when the trace has it, else a seeded draw from ``[classes] mix``
  (its own generator: ``SeedSequence(seed).spawn(3)[2]``, so the arrival and tool draws are unchanged).
- :func:`deadline_context`: per program its JCT deadline (its class's ``deadline_s``, else ``deadline_x`` x its
  uncontended JCT) and per turn the uncontended time from its release to the program's end. Uncontended time
  is :mod:`agentreplay.fleet.uncontended`'s definition (each call alone, its history cached, chunked prefill,
  batch-1 decode), priced by the first instance's pricer, with the trace's tool durations (0 where missing).
- :func:`reject_infeasible`: the deadline policy's ``reject`` action (:mod:`agentreplay.router.deadline`).
- :func:`class_summary`: per class, programs attempted / rejected / finished, goodput against the class deadline
  (:func:`agentreplay.fleet.goodput.goodput`) and JCT p50 / p90.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentreplay.features.classes.config import CLASSES, ClassConfig
from agentreplay.perf.alone import turn_service_s
from agentreplay.router.deadline import DeadlineContext
from agentreplay.sim.workload import Workload


def assign_classes(workload: Workload, cfg: ClassConfig, seed: int, trace: Any = None) -> np.ndarray:
    """Class rank per program (module docstring); a trace column with an unknown class name fails naming it."""
    programs = getattr(trace, "programs", None)
    if programs is not None and cfg.column in programs.columns:
        names = dict(zip(programs["program_id"].astype(str), programs[cfg.column], strict=True))
        out = np.empty(workload.n_programs, dtype=np.int64)
        for p, pid in enumerate(workload.program_ids):
            c = names.get(pid)
            if c not in CLASSES:
                raise ValueError(
                    f"trace programs column {cfg.column!r}: program {pid!r} has class {c!r}; known: {list(CLASSES)}"
                )
            out[p] = CLASSES.index(str(c))
        return out
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])
    shares = np.array([float(cfg.mix.get(c, 0.0)) for c in CLASSES])
    return rng.choice(len(CLASSES), size=workload.n_programs, p=shares / shares.sum()).astype(np.int64)


def turn_estimates(workload: Workload, pricer: Any, chunk_tokens: int, block_size: int) -> np.ndarray:
    """Uncontended service seconds of each turn (prefill + decode alone, its history cached)."""
    inp, out, reuse = workload.input_tokens, workload.output_tokens, workload.reused_tokens
    first = np.zeros(workload.n_turns, dtype=bool)
    first[workload.turn_start[:-1]] = True
    hits = np.where(first, 0, np.maximum(np.minimum(reuse, inp - 1), 0) // block_size * block_size)
    memo: dict[tuple[int, int, int], float] = {}
    est = np.empty(workload.n_turns)
    for t in range(workload.n_turns):
        key = (int(inp[t]), int(hits[t]), int(out[t]))
        got = memo.get(key)
        if got is None:
            pre, dec = turn_service_s(pricer, chunk_tokens, *key)
            got = memo[key] = pre + dec
        est[t] = got
    return est


def deadline_context(
    workload: Workload, classes: np.ndarray, cfg: ClassConfig, service_s: np.ndarray
) -> tuple[DeadlineContext, np.ndarray]:
    """``(context, uncontended JCT per program)`` from per-turn service seconds ``service_s``."""
    tool = np.nan_to_num(workload.tool_s, nan=0.0)
    starts = workload.turn_start
    last = np.zeros(workload.n_turns, dtype=bool)
    last[starts[1:] - 1] = True
    step = service_s + np.where(last, 0.0, tool)  # a turn, then the tool gap after it (none after the last)
    remaining = np.empty(workload.n_turns)
    jct0 = np.empty(workload.n_programs)
    for p in range(workload.n_programs):
        a, b = int(starts[p]), int(starts[p + 1])
        remaining[a:b] = np.cumsum(step[a:b][::-1])[::-1]
        jct0[p] = remaining[a]
    deadline = np.empty(workload.n_programs)
    for k, name in enumerate(CLASSES):
        sel = classes == k
        if name in cfg.deadline_s:
            deadline[sel] = float(cfg.deadline_s[name])
        else:
            deadline[sel] = float(cfg.deadline_x[name]) * jct0[sel]
    return DeadlineContext(deadline, remaining, classes), jct0


def reject_infeasible(workload: Workload, ctx: DeadlineContext) -> tuple[Workload, DeadlineContext, np.ndarray]:
    """The workload without the programs whose uncontended JCT exceeds their deadline, the context restricted to
    the rest, and the rejected programs' original indices."""
    starts = workload.turn_start
    jct0 = ctx.remaining_s[starts[:-1]]
    bad = jct0 > ctx.deadline_s + 1e-9
    if not bad.any():
        return workload, ctx, np.zeros(0, dtype=np.int64)
    if bad.all():
        raise ValueError("deadline admission (reject): no program can meet its deadline even uncontended")
    keep = np.flatnonzero(~bad)
    turns = np.concatenate([np.arange(starts[p], starts[p + 1]) for p in keep])
    lens = starts[keep + 1] - starts[keep]
    new_start = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    sub = workload.select(keep.tolist(), turns, new_start, workload.output_tokens[turns])
    sub_ctx = DeadlineContext(ctx.deadline_s[keep], ctx.remaining_s[turns], ctx.priority[keep])
    return sub, sub_ctx, np.flatnonzero(bad)


def _q(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q)) if len(x) else float("nan")


def class_summary(
    jct_s: np.ndarray, classes: np.ndarray, deadline_s: np.ndarray, rejected_classes: np.ndarray
) -> dict[str, dict[str, float | int]]:
    """Per class: attempted (run + rejected), rejected, met, goodput, JCT p50 / p90 of the programs that ran."""
    from agentreplay.fleet.goodput import goodput

    out: dict[str, dict[str, float | int]] = {}
    for k, name in enumerate(CLASSES):
        sel = classes == k
        removed = int((rejected_classes == k).sum())
        if not sel.any() and not removed:
            continue
        g = goodput(jct_s[sel], deadline_s[sel], removed=removed)
        out[name] = {
            "attempted": g["attempted"],
            "rejected": removed,
            "met": g["met"],
            "goodput": g["goodput"],
            "jct_p50_s": _q(jct_s[sel], 0.5),
            "jct_p90_s": _q(jct_s[sel], 0.9),
        }
    return out


class ClassSetup:
    """What :func:`setup` prepared: the workload to run, class ranks and deadline context of its programs (None
    when not needed), and the classes of the programs the deadline policy rejected."""

    def __init__(
        self, workload: Workload, classes: np.ndarray | None, ctx: DeadlineContext | None, rejected: np.ndarray
    ) -> None:
        self.workload, self.classes, self.ctx, self.rejected_classes = workload, classes, ctx, rejected

    source = "seeded mix"  #: where the classes came from: "seeded mix" or "trace column NAME"

    def summary(self, jct_s: np.ndarray) -> dict[str, Any]:
        """Per class (:func:`class_summary`), and ``source``: where the classes came from."""
        assert self.classes is not None and self.ctx is not None
        out: dict[str, Any] = dict(class_summary(jct_s, self.classes, self.ctx.deadline_s, self.rejected_classes))
        out["source"] = self.source
        return out


def setup(trace: Any, workload: Workload, cfg: Any, pricer: Any, chunk_tokens: int) -> ClassSetup:
    """Classes (``[classes] enabled``) and deadlines (classes on, or the deadline admission policy) of a run of
    ``workload`` under ``cfg`` (a SimConfig); with ``deadline_action = "reject"`` the infeasible programs are
    removed from the workload."""
    cc = cfg.classes
    classes = (
        assign_classes(workload, cc, cfg.seed, trace) if cc.enabled else np.zeros(workload.n_programs, dtype=np.int64)
    )
    service = turn_estimates(workload, pricer, chunk_tokens, cfg.cache.block_size)
    ctx, _ = deadline_context(workload, classes, cc, service)
    rejected = np.zeros(0, dtype=np.int64)
    if cfg.admission.policy == "deadline" and cfg.admission.deadline_action == "reject":
        workload, ctx, gone = reject_infeasible(workload, ctx)
        rejected = classes[gone]
        classes = ctx.priority
    out = ClassSetup(workload, classes, ctx, rejected)
    programs = getattr(trace, "programs", None)
    if programs is not None and cc.column in programs.columns:
        out.source = f"trace column {cc.column}"
    return out
