"""The lockstep check: the simulator's scheduler and KV cache against vLLM's own, on one virtual clock.

The live check (``validate.py``) runs a real engine, whose queueing depends on how fast this machine is at that
moment; on a quiet machine the ``ci`` cell queues too little for a wrong scheduler to show (README §5d). This
check takes the machine out: vLLM's ``Scheduler`` (its ``KVCacheManager``, block pool and prefix cache, the objects
``EngineCore`` builds) runs in the vLLM virtualenv under ``lockstep_vllm.py``, which stands in for the engine core
and the model on a virtual clock, and the simulator runs the same cell with a pricer that prices a step the same
way. Both see the same token-id prompts (the live driver's :class:`collectors.live.prompts.PromptBuilder`, with the
outputs fixed in advance), the same tool gaps and the same closed loop, so every difference between them is a
difference of scheduling or caching logic, never of load. Compared per turn: cached tokens at first admission
(vLLM's ``PrefillStats.num_cached_tokens``, what the API reports) and preemptions exactly; release, first
scheduling, first and last token within :data:`TIME_TOL_S`.

    python benchmarks/vllm_cpu/lockstep.py --preset ci --out /tmp/lockstep   # both sides' turns, compare.json
    python benchmarks/vllm_cpu/lockstep.py --tool-scale 0.01 --sim-reserve-full-isl false   # a wrong scheduler
    python benchmarks/vllm_cpu/lockstep.py --sweep          # SWEEP: FCFS, priority policy, the wrong schedulers
    python benchmarks/vllm_cpu/lockstep.py --async-effect   # vLLM's async scheduler against its sync one

The step-time formula is ``a0 + per_token * scheduled tokens``: the simulator's
:class:`~collectors.live.engine_profile_pricer.ProfilePricer` with ``a1 = b = per_token`` and ``c = p = d = 0``
prices a step that way whatever mix of prefill and decode it holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from agentreplay.experiment.tables import markdown  # noqa: E402
from agentreplay.sim.config import WorkloadConfig  # noqa: E402
from agentreplay.sim.run import simulate  # noqa: E402
from agentreplay.trace.io import read_trace  # noqa: E402
from benchmarks.vllm_cpu.engine import (  # noqa: E402
    PRESETS,
    TINY_LLAMA,
    Cell,
    add_cell_options,
    cell_from,
    venv_python,
    write_model,
)
from benchmarks.vllm_cpu.validate import TRACE, WRONG_QUEUE, sim_config  # noqa: E402
from collectors.live.driver import prepare_workload  # noqa: E402
from collectors.live.engine_profile_pricer import PricerCoeffs, ProfilePricer  # noqa: E402
from collectors.live.prompts import PromptBuilder  # noqa: E402
from validation.e2e import live as live_check  # noqa: E402

HARNESS = Path(__file__).with_name("lockstep_vllm.py")

_CI, _FULL = PRESETS["ci"], PRESETS["full"]
#: the cells ``--sweep`` runs (README §5e): the live check's, and tighter ones (sustained KV pressure, small prefill
#: chunks, few sequences, fewer blocks, more programs); the integration test runs the first five
SWEEP: dict[str, Cell] = {
    "ci": _CI,
    "ci, tool gaps x 0.01": dataclasses.replace(_CI, tool_scale=0.01),
    "ci, 128-token chunks, tool gaps x 0.01": dataclasses.replace(_CI, max_num_batched_tokens=128, tool_scale=0.01),
    "ci, 2 sequences, tool gaps x 0.01": dataclasses.replace(_CI, max_num_seqs=2, tool_scale=0.01),
    "full, tool gaps x 0.01": dataclasses.replace(_FULL, tool_scale=0.01),
    "ci, tool gaps x 0": dataclasses.replace(_CI, tool_scale=0.0),
    "ci, 256-token chunks": dataclasses.replace(_CI, max_num_batched_tokens=256),
    "ci, 72 blocks, tool gaps x 0.01": dataclasses.replace(_CI, num_gpu_blocks=72, tool_scale=0.01),
    "ci, 24 programs x8": dataclasses.replace(_CI, programs=24, concurrency=8),
    "full": _FULL,
    "full, 140 blocks x12, tool gaps x 0.02": dataclasses.replace(
        _FULL, num_gpu_blocks=140, concurrency=12, tool_scale=0.02
    ),
}
#: the deliberately wrong schedulers: vLLM 0.32's admission rule off, and program-arrival queue order
WRONG: dict[str, dict[str, Any]] = {
    "first-chunk admission": {"reserve_full_isl": False},
    "program-arrival order": {"queue": WRONG_QUEUE},
}


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """Seconds a step takes: ``a0 + per_token * scheduled tokens`` (on both sides)."""

    a0: float = 0.005
    per_token: float = 50e-6

    def pricer(self) -> ProfilePricer:
        return ProfilePricer(PricerCoeffs(a0=self.a0, a1=self.per_token, c=0.0, p=0.0, b=self.per_token, d=0.0))


def workload(cell: Cell) -> Any:
    """The cell's workload, as the live driver prepares it (head, token scale), tool gaps scaled."""
    cfg = WorkloadConfig(arrival="closed", concurrency=cell.concurrency, max_programs=cell.programs)
    w = prepare_workload(read_trace(TRACE), cfg, cell.token_scale)
    return dataclasses.replace(w, tool_s=np.asarray(w.tool_s, dtype=float) * cell.tool_scale)


def script(
    cell: Cell,
    step: Step,
    model_dir: Path,
    *,
    async_scheduling: bool = False,
    priorities: np.ndarray | None = None,
) -> dict[str, Any]:
    """The engine side's input: every turn's prompt and output ids (outputs fixed in advance, so a turn's prompt
    holds its predecessor's real output ids, as the live driver's does), tool gaps, limits and step formula."""
    w = workload(cell)
    prompts = PromptBuilder(w, seed=cell.seed, vocab_size=int(TINY_LLAMA["vocab_size"]))
    programs = []
    for p in range(w.n_programs):
        state, lo, n = prompts.program(p), int(w.turn_start[p]), w.n_turns_of(p)
        turns = []
        for k in range(n):
            g = lo + k
            ids, _ = state.next_prompt(int(w.input_tokens[g]), int(w.reused_tokens[g]))
            out = state.placeholder_output(int(w.output_tokens[g]))
            state.add_output(ids, out)
            turns.append({"prompt": ids, "output": out, "gap_s": float(w.tool_s[g]) if k < n - 1 else None})
        prio = 0 if priorities is None else int(priorities[p])
        programs.append({"id": str(w.program_ids[p]), "priority": prio, "turns": turns})
    return {
        "engine": {
            "model_dir": str(model_dir),
            "block_size": cell.block_size,
            "num_gpu_blocks": cell.num_gpu_blocks,
            "max_num_seqs": cell.max_num_seqs,
            "max_num_batched_tokens": cell.max_num_batched_tokens,
            "max_model_len": cell.max_model_len,
            "reserve_full_isl": cell.reserve_full_isl,
            "num_kv_heads": int(TINY_LLAMA["num_key_value_heads"]),
            "head_size": int(TINY_LLAMA["head_dim"]),
            "async_scheduling": async_scheduling,
            "policy": "fcfs" if priorities is None else "priority",
        },
        "step": dataclasses.asdict(step),
        "concurrency": cell.concurrency,
        "programs": programs,
    }


#: the priority classes' shares the priority cells draw each program's class from (``[classes] mix``)
CLASS_MIX: dict[str, float] = {"interactive": 0.34, "background": 0.33, "batch": 0.33}


def priorities(cell: Cell, mix: dict[str, float]) -> np.ndarray:
    """Each program's class rank, drawn as the simulator's ``[classes]`` draws it (same seed, same mix)."""
    from agentreplay.features.classes.classes import assign_classes
    from agentreplay.features.classes.config import ClassConfig

    return assign_classes(workload(cell), ClassConfig(enabled=True, mix=mix), cell.seed)


def run_engine(
    cells: list[Cell],
    step: Step | list[Step],
    python: Path,
    work: Path,
    *,
    async_scheduling: bool = False,
    classes: dict[str, float] | None = None,
) -> list[pd.DataFrame]:
    """vLLM's scheduler on each cell, with ``step`` (one for all, or one per cell): ``lockstep_vllm.py`` in the vLLM
    virtualenv, one process for all of them; ``async_scheduling``: vLLM's ``AsyncScheduler`` behind a batch queue,
    as CUDA runs it by default (the simulator models the sync one); ``classes``: a class mix, each program's class
    rank its requests' priority under vLLM's priority policy (``--scheduling-policy priority``). One row per turn
    each."""
    steps = step if isinstance(step, list) else [step] * len(cells)
    if not python.exists():
        raise FileNotFoundError(f"no vLLM virtualenv python at {python}: run `bash .ci/vllm_cpu.sh`")
    work.mkdir(parents=True, exist_ok=True)
    model = write_model(work / "model", max(c.max_model_len for c in cells))
    scripts = [
        script(
            c,
            st,
            model,
            async_scheduling=async_scheduling,
            priorities=None if classes is None else priorities(c, classes),
        )
        for c, st in zip(cells, steps, strict=True)
    ]
    (work / "script.json").write_text(json.dumps({"cells": scripts}))
    res = subprocess.run(
        [str(python), str(HARNESS), str(work / "script.json"), str(work / "engine.json")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if res.returncode != 0:
        raise RuntimeError(f"{HARNESS.name} failed ({res.returncode}):\n{res.stderr[-4000:]}")
    return [pd.DataFrame(c["turns"]) for c in json.loads((work / "engine.json").read_text())["cells"]]


def run_sim(
    cell: Cell,
    step: Step,
    *,
    queue: str | None = None,
    reserve_full_isl: bool | None = None,
    classes: dict[str, float] | None = None,
) -> pd.DataFrame:
    """The simulator on the cell, one row per turn in the engine side's columns. ``reserve_full_isl`` replaces the
    cell's admission rule and ``queue`` vLLM's FCFS waiting order (``[policy] queue``): the wrong schedulers."""
    if reserve_full_isl is not None:
        cell = dataclasses.replace(cell, reserve_full_isl=reserve_full_isl)
    w = workload(cell)
    facts = {
        "block_size": cell.block_size,
        "num_gpu_blocks": cell.num_gpu_blocks,
        "max_num_seqs": cell.max_num_seqs,
        "max_num_batched_tokens": cell.max_num_batched_tokens,
    }
    cfg = sim_config(cell, facts).replace(tools={"mode": "replay", "scale": 1.0})
    if classes is not None:  # vLLM's priority policy: the queue by (rank, arrival), the worst-ranked victim
        cfg = cfg.replace(
            classes={"enabled": True, "mix": classes}, policy={"queue": "priority", "victim": "lowest-priority"}
        )
    if queue is not None:
        cfg = cfg.replace(policy={"queue": queue})
    t = simulate(w, cfg, perf=step.pricer()).turns
    index = {str(pid): p for p, pid in enumerate(w.program_ids)}
    return pd.DataFrame(
        {
            "program": [index[str(x)] for x in t["program_id"]],
            "turn": t["turn_idx"].astype(int),
            "release_s": t["release_s"].astype(float),
            "first_scheduled_s": t["first_scheduled_s"].astype(float),
            "first_token_s": (t["release_s"] + t["ttft_s"]).astype(float),
            "last_token_s": t["finish_s"].astype(float),
            "cached_tokens": t["cached_tokens"].astype(int),
            "preemptions": t["preemptions"].astype(int),
        }
    )


#: two clocks that summed the same step times in a different order differ by float rounding only (~1e-13 s)
TIME_TOL_S = 1e-6
COUNTS = ("cached_tokens", "preemptions")
TIMES = ("release_s", "first_scheduled_s", "first_token_s", "last_token_s")


def compare(engine: pd.DataFrame, sim: pd.DataFrame) -> dict[str, Any]:
    """Turn by turn: per figure, the totals, how many turns differ (counts exactly, times by more than
    :data:`TIME_TOL_S`) and the first turn that differs (by the engine's first scheduling)."""
    m = engine.merge(sim, on=["program", "turn"], suffixes=("_engine", "_sim"), how="outer", indicator=True)
    out: dict[str, Any] = {"turns": len(m), "turns_on_one_side_only": int((m["_merge"] != "both").sum())}
    m = m[m["_merge"] == "both"].sort_values("first_scheduled_s_engine", kind="stable")
    for col in (*COUNTS, *TIMES):
        e, s = m[f"{col}_engine"].to_numpy(dtype=float), m[f"{col}_sim"].to_numpy(dtype=float)
        bad = (e != s) if col in COUNTS else ~(np.abs(e - s) <= TIME_TOL_S)
        fig: dict[str, Any] = {"turns_differing": int(bad.sum())}
        if col in COUNTS:
            fig.update(engine=int(e.sum()), sim=int(s.sum()))
        else:
            fig["max_abs_diff_s"] = float(np.max(np.abs(e - s))) if len(e) else 0.0
        if bad.any():
            i = int(np.argmax(bad))
            fig["first"] = {
                "program": int(m["program"].iloc[i]),
                "turn": int(m["turn"].iloc[i]),
                "engine": float(e[i]),
                "sim": float(s[i]),
            }
        out[col] = fig
    out["identical"] = out["turns_on_one_side_only"] == 0 and all(
        out[c]["turns_differing"] == 0 for c in (*COUNTS, *TIMES)
    )
    return out


def queued_turns(engine: pd.DataFrame) -> int:
    """Turns that waited in vLLM's queue as long as the live check counts as queued (``validation.e2e.live``)."""
    return int(np.sum(engine["first_scheduled_s"] - engine["release_s"] >= live_check.ORDER_MIN_OVERLAP_S))


def verdict(res: dict[str, Any], figures: tuple[str, ...] = (*COUNTS, *TIMES)) -> str:
    """``identical on every turn``, or which of ``figures`` differ and on how many turns."""
    if res["identical"]:
        return "identical on every turn"
    return "differs: " + ", ".join(
        f"{f} on {res[f]['turns_differing']} turns" for f in figures if res[f]["turns_differing"]
    )


def _engine_cells(engine: pd.DataFrame) -> list[str]:
    """Turns, cached tokens and preemptions of one vLLM run."""
    return [str(len(engine)), f"{int(engine['cached_tokens'].sum()):,}", str(int(engine["preemptions"].sum()))]


def describe(step: Step, engine: pd.DataFrame, res: dict[str, Any]) -> str:
    """One line: the step formula, what vLLM did, and whether the simulator did the same."""
    _, hits, pre = _engine_cells(engine)
    return (
        f"a0 {step.a0 * 1e3:g} ms, {step.per_token * 1e6:g} us/token: vLLM {hits} cached tokens, {pre} preemptions, "
        f"{queued_turns(engine)} turns queued >= 50 ms; simulator {verdict(res)}"
    )


def sweep(python: Path, out: Path | None) -> int:
    """Every :data:`SWEEP` cell through vLLM's scheduler (one process), then the simulator with vLLM's scheduler and
    with each :data:`WRONG` one; then every cell again under vLLM's priority policy (classes drawn from
    :data:`CLASS_MIX`) against the simulator's. Prints Markdown tables. 0 when the simulator matches every cell in
    both and every wrong scheduler differs on a logic figure (cached tokens or preemptions) in every cell."""
    step, cells = Step(), list(SWEEP.values())
    with tempfile.TemporaryDirectory(prefix="lockstep-") as tmp:
        work = out or Path(tmp)
        engines = run_engine(cells, step, python, work / "fcfs")
        prio = run_engine(cells, step, python, work / "priority", classes=CLASS_MIX)
    ok, rows = True, []
    for (name, cell), engine in zip(SWEEP.items(), engines, strict=True):
        right = compare(engine, run_sim(cell, step))
        ok &= right["identical"]
        cols = ["identical" if right["identical"] else "**differs**"]
        for kw in WRONG.values():
            res = compare(engine, run_sim(cell, step, **kw))
            logic = any(res[f]["turns_differing"] for f in COUNTS)
            ok &= logic
            cols.append(
                verdict(res, COUNTS).removeprefix("differs: ") if logic else "**same cached tokens and preemptions**"
            )
        rows.append([name, *_engine_cells(engine), *cols])
    head = ["cell", "turns", "vLLM cached tokens", "vLLM preemptions"]
    print(markdown([*head, "simulator", *WRONG], rows))
    print(f"vLLM's priority policy (`--scheduling-policy priority`; classes drawn from the mix {CLASS_MIX}):\n")
    rows = []
    for (name, cell), engine in zip(SWEEP.items(), prio, strict=True):
        res = compare(engine, run_sim(cell, step, classes=CLASS_MIX))
        ok &= res["identical"]
        rows.append([name, *_engine_cells(engine), verdict(res)])
    print(markdown([*head, "simulator (priority queue, lowest-priority victim)"], rows), end="")
    return 0 if ok else 1


def _jct(turns: pd.DataFrame) -> pd.Series:
    g = turns.groupby("program")
    return g["last_token_s"].max() - g["release_s"].min()


def async_effect(python: Path, out: Path | None) -> None:
    """What vLLM's async scheduling (CUDA's default) changes against its sync scheduler (the CPU platform's, the
    one the simulator models) on every :data:`SWEEP` cell, both vLLM's own on the same virtual clock; prints a
    Markdown table (error = async / sync - 1)."""
    step, cells = Step(), list(SWEEP.values())
    with tempfile.TemporaryDirectory(prefix="lockstep-") as tmp:
        work = out or Path(tmp)
        sync = run_engine(cells, step, python, work / "sync")
        asyn = run_engine(cells, step, python, work / "async", async_scheduling=True)
    rows = []
    for name, s, a in zip(SWEEP, sync, asyn, strict=True):
        pairs = (
            (_jct(s).mean(), _jct(a).mean(), "{:.2f}"),
            (s["last_token_s"].max(), a["last_token_s"].max(), "{:.2f}"),
            ((s["first_token_s"] - s["release_s"]).mean(), (a["first_token_s"] - a["release_s"]).mean(), "{:.3f}"),
            (s["cached_tokens"].sum(), a["cached_tokens"].sum(), "{:,.0f}"),
        )
        cols = [f"{f.format(x)} / {f.format(y)} ({y / x - 1:+.1%})" for x, y, f in pairs]
        rows.append([name, *cols, f"{s['preemptions'].sum()} / {a['preemptions'].sum()}"])
    head = ["cell", "JCT mean, s: sync / async", "makespan", "TTFT mean", "cached tokens", "preemptions"]
    print(markdown(head, rows), end="")


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="ci", choices=sorted(PRESETS))
    ap.add_argument("--out", type=Path, default=None, help="keep the script, both sides' turns and the comparisons")
    ap.add_argument("--python", type=Path, default=None, help=f"the vLLM virtualenv's python ({venv_python()})")
    ap.add_argument("--a0-ms", type=_floats, default=[Step().a0 * 1e3], help="step constant(s), ms, comma-separated")
    ap.add_argument(
        "--per-token-us", type=_floats, default=[Step().per_token * 1e6], help="per-token cost(s), us, comma-separated"
    )
    ap.add_argument(
        "--sim-reserve-full-isl",
        choices=("true", "false"),
        default=None,
        help="the simulator's admission rule (default: the engine's; false is a wrong scheduler)",
    )
    ap.add_argument("--sim-queue", default=None, help=f"the simulator's queue order (vLLM: fcfs; wrong: {WRONG_QUEUE})")
    ap.add_argument("--sweep", action="store_true", help="every cell of SWEEP, with vLLM's and the wrong schedulers")
    ap.add_argument(
        "--async-effect", action="store_true", help="every cell of SWEEP: vLLM's async scheduler against its sync one"
    )
    add_cell_options(ap)
    a = ap.parse_args(argv)
    if a.sweep:
        return sweep(a.python or venv_python(), a.out)
    if a.async_effect:
        async_effect(a.python or venv_python(), a.out)
        return 0
    cell = cell_from(a, a.preset)
    steps = [Step(a0=x * 1e-3, per_token=y * 1e-6) for x in a.a0_ms for y in a.per_token_us]
    rule = None if a.sim_reserve_full_isl is None else a.sim_reserve_full_isl == "true"
    results = []
    with tempfile.TemporaryDirectory(prefix="lockstep-") as tmp:
        work = a.out or Path(tmp)
        engines = run_engine([cell] * len(steps), steps, a.python or venv_python(), work)
        for i, (step, engine) in enumerate(zip(steps, engines, strict=True)):
            sim = run_sim(cell, step, queue=a.sim_queue, reserve_full_isl=rule)
            res = compare(engine, sim)
            results.append({"step": dataclasses.asdict(step), **res})
            print(describe(step, engine, res))
            if a.out is not None:
                engine.to_csv(work / f"engine{i}.csv", index=False)
                sim.to_csv(work / f"sim{i}.csv", index=False)
        if a.out is not None:
            (work / "compare.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
