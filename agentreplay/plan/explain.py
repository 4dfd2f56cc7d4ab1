"""Why configurations fail, grouped, each with the option that would make it run.

Groups (in this order): ``weights`` (the model's weights and the activation reserve do not fit in one GPU's
memory budget at that TP), ``kv`` (the KV cache left cannot hold the trace's longest request, so vLLM would
refuse it), ``max-model-len`` (the configured ``max_model_len`` needs more KV than there is), ``failed`` (any
other error), ``objective`` (the configuration ran and missed the objective, by how much).

A capacity failure is a property of the GPU, model and TP (every preset and instance count fails alike), so it is
one line per GPU / model / TP naming the presets. The suggestion is computed with the simulator's own capacity
check (:func:`agentreplay.sim.run.plan_instance`): the smallest TP (a power of two up to 16 that divides the
model) whose KV holds the longest request, and where the weights fit at the failing TP, the ``--max-model-len``
that makes it start and how many programs that cuts (vLLM rejects longer requests; an agent program stops at its
first rejected call).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from agentreplay.plan.slo import Term
from agentreplay.plan.trial import Trial

GROUPS = {
    "weights": "weights do not fit in GPU memory",
    "kv": "KV cache cannot hold the longest request",
    "max-model-len": "max_model_len needs more KV than there is",
    "failed": "the simulation failed",
    "objective": "ran, and missed the objective",
}
_TPS = (1, 2, 4, 8, 16)


def kind_of(error: str | None) -> str:
    """The failure group of a cell error (:data:`GROUPS`)."""
    e = error or ""
    if "exceed the budget" in e or "less than one block" in e:
        return "weights"
    if "longest request" in e:
        return "kv"
    if "max_model_len" in e and "refuses to start" in e:
        return "max-model-len"
    return "failed"


def _clean(error: str | None) -> str:
    """The cell error without its exception name, source line and the simulator's own advice (the fix here
    replaces it)."""
    e = re.sub(r"^\w+Error: ", "", error or "")
    e = re.sub(r" \(at [\w./]+:\d+\)$", "", e)
    return re.sub(r"; (set|lower) --max-model-len.*$", "", e)


def explain(
    trials: Sequence[Trial], slo: Sequence[Term], states: Sequence[Any], base: dict[str, Any], workload: Any
) -> dict[str, list[dict[str, Any]]]:
    """Failure lines by group (only non-empty groups): ``{group: [{"configurations", "reason", "fix"}, ...]}``.

    ``states``: the search's family states (why a family's search ended); ``base``: the plan's base config
    (TOML layout); ``workload``: the compiled workload the plan replays (for the longest request), a function
    returning it (called only when a capacity failure needs it), or None."""
    out: dict[str, list[dict[str, Any]]] = {}
    capacity: dict[tuple[str, str, int, str], list[Trial]] = {}
    for t in trials:
        if t.feasible or t.check:
            continue
        if t.status != "ok":
            kind = kind_of(t.error)
            capacity.setdefault((t.family.gpu, t.family.model, t.family.tp, kind), []).append(t)
        else:
            out.setdefault("objective", []).append(_objective(t, slo, states))
    if capacity and callable(workload):
        workload = workload()
    for (gpu, model, tp, kind), ts in capacity.items():
        presets = sorted({t.family.preset for t in ts})
        fix = _fix(gpu, model, tp, base, workload) if kind in ("weights", "kv", "max-model-len") else ""
        out.setdefault(kind, []).append(
            {
                "configurations": f"{gpu} {model} tp{tp} ({', '.join(presets)})",
                "reason": _clean(ts[0].error),
                "fix": fix,
            }
        )
    return {k: out[k] for k in GROUPS if k in out}


def _objective(t: Trial, slo: Sequence[Term], states: Sequence[Any]) -> dict[str, Any]:
    st = next((s for s in states if s.family == t.family), None)
    end = ""
    if st is not None and st.hi is not None:
        end = f"{st.hi}x meets it"
    elif st is not None and st.end == "max-instances":
        end = f"never met up to --max-instances {st.lo}: raise it, or a larger TP / GPU"
    elif st is not None and st.end == "pruned":
        end = "search stopped: more instances would cost more than the configurations reported"
    return {
        "configurations": f"{t.instances}x {t.family.gpu} tp{t.family.tp} {t.family.preset} ({t.family.model})",
        "reason": _missed(t, slo),
        "fix": end,
    }


def _missed(t: Trial, slo: Sequence[Term]) -> str:
    """``jct_p90 16,960 s > 900 s (by 1784%)``; programs removed by admission."""
    parts = []
    for term in slo:
        v = t.value(term)
        if term.met(v):
            continue
        if v is None or not math.isfinite(v):
            parts.append(f"{term.metric}: no figure")
            continue
        op, u = (">", " s") if term.op == "<=" else ("<", "")
        parts.append(f"{term.metric} {_num(v)}{u} {op} {term.bound:g}{u} (by {abs(v - term.bound) / term.bound:.0%})")
    removed = int(t.figures.get("rejected_programs_removed") or 0)
    if removed:
        parts.append(f"{removed} programs removed by admission (each counts as missed)")
    return "; ".join(parts)


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _fix(gpu: str, model: str, tp: int, base: dict[str, Any], workload: Any) -> str:
    """The TP (or ``--max-model-len``) that makes ``gpu`` / ``model`` start and hold the longest request."""
    from agentreplay.perf import load_model

    spec = load_model(model)
    longest = int((workload.input_tokens + workload.output_tokens).max()) if workload is not None else None
    tokens = {}
    for cand in sorted({tp, *_TPS}):
        if cand < tp:
            continue
        try:
            spec.validate_tp(cand)
        except ValueError:
            continue
        tokens[cand] = _kv_tokens(gpu, model, cand, base)
    fits = [c for c, k in tokens.items() if k is not None and (longest is None or k >= longest)]
    parts = []
    if fits and fits[0] != tp:
        held = f" (KV {tokens[fits[0]]:,} tokens holds the longest request, {longest:,})" if longest else ""
        parts.append(f"--tp {fits[0]}{held}")
    runs = [c for c, k in tokens.items() if k is not None]
    if longest is not None and runs and runs[0] not in fits:
        mml = tokens[runs[0]]
        assert mml is not None
        cut = _programs_cut(workload, mml)
        at = "" if runs[0] == tp else f"--tp {runs[0]} "
        parts.append(
            f"{at}--max-model-len {mml:,} (it starts; vLLM rejects longer requests, which cuts {cut} of "
            f"{workload.n_programs} programs at their first longer call)"
        )
    if not parts:
        return "no TP up to 16 fits this model on this GPU; a GPU with more memory"
    return "feasible with " + ", or ".join(parts)


def _kv_tokens(gpu: str, model: str, tp: int, base: dict[str, Any]) -> int | None:
    """KV tokens one instance holds (the simulator's capacity model), or None when the weights do not fit."""
    from agentreplay.sim.config import from_dict
    from agentreplay.sim.run import CapacityError, plan_instance

    cfg = from_dict({**base, "hardware": {**(base.get("hardware") or {}), "gpu": gpu, "model": model, "tp": tp}})
    cfg = cfg.replace(scheduler={"max_model_len": None})
    try:
        p = plan_instance(cfg, gpu, tp, cfg.hardware.dtype)
    except (CapacityError, ValueError):
        return None
    return int(p.num_gpu_blocks * cfg.cache.block_size)


def _programs_cut(workload: Any, max_model_len: int) -> int:
    """Programs with a request of ``max_model_len`` prompt tokens or more (vLLM rejects it; the program stops)."""
    import numpy as np

    over = workload.input_tokens >= max_model_len
    prog = np.repeat(np.arange(workload.n_programs), np.diff(workload.turn_start))
    return len(np.unique(prog[over]))


def lines(groups: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The console / Markdown lines: a heading per group, one line per failing configuration (or GPU / TP)."""
    out = []
    for kind, items in groups.items():
        out.append(f"{GROUPS[kind]} ({len(items)}):")
        for it in items:
            out.append(f"  {it['configurations']}: {it['reason']}" + (f"; {it['fix']}" if it["fix"] else ""))
    return out
