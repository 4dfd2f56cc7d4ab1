"""The live cell's protocol (validation.e2e.live): admission order, spread, tolerances, verdict; and the committed
3-repeat engine session re-judged without an engine, with the right and with deliberately wrong schedulers."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import sys

import numpy as np
import pytest

from tests.conftest import ROOT
from validation.e2e.live import TIMING, admission_order, judge, rows, spread, tolerances

COMMITTED = ROOT / "reports" / "live" / "vllm-cpu-ci.json"


def test_admission_order_counts_only_pairs_that_queued_together() -> None:
    arrive = np.array([0.0, 0.2, 0.4, 5.0])
    admit = np.array([1.0, 2.0, 3.0, 5.001])  # the first three queue together; the last is admitted at once
    fifo = admission_order(arrive, admit)
    assert fifo == {"pairs": 3.0, "fcfs": 1.0, "queued": 3.0}
    lifo = admission_order(arrive, np.array([3.0, 2.0, 1.0, 5.001]))
    assert lifo["pairs"] == 3 and lifo["fcfs"] == 0.0
    # entered the queue or admitted closer than the tie window: not judged
    assert admission_order(np.array([0.0, 0.05]), np.array([1.0, 0.9]))["pairs"] == 0
    assert math.isnan(admission_order(np.array([0.0, 5.0]), np.array([0.01, 5.01]))["fcfs"])


def test_admission_order_refuses_missing_times() -> None:
    with pytest.raises(ValueError, match="per-request-metrics"):
        admission_order(np.array([0.0, 0.1]), np.array([1.0, math.nan]))


def _figs(scale: float, hits: float, pre: float, fcfs: float = 1.0) -> dict[str, float]:
    return {
        **{k: 10.0 * scale for k in TIMING},
        "cached_tokens": hits,
        "preemptions": pre,
        "admission_fcfs": fcfs,
        "admission_pairs": 50.0,
    }


def _repeats(
    real_scales: list[float],
    sim_scales: list[float],
    pre_real: list[float],
    pre_sim: list[float],
    fcfs_sim: float = 1.0,
) -> list[dict]:
    return [
        {"real": _figs(r, 1000.0, pr), "sim": _figs(s, 1000.0, ps, fcfs_sim)}
        for r, s, pr, ps in zip(real_scales, sim_scales, pre_real, pre_sim, strict=True)
    ]


def test_spread_and_tolerances_follow_the_engine_and_the_pricer() -> None:
    assert spread([9.0, 10.0, 12.0]) == {"min": 9.0, "max": 12.0, "median": 10.0, "rel_range": pytest.approx(0.3)}
    calm = tolerances(_repeats([1.0, 1.0, 1.0], [1.0] * 3, [5, 5, 5], [5] * 3))
    noisy = tolerances(_repeats([0.8, 1.0, 1.2], [1.0] * 3, [2, 5, 9], [5] * 3))
    assert calm["jct_mean_s"] == 0.15 and calm["cached_tokens"] == 0.25
    assert noisy["jct_mean_s"] == pytest.approx(0.8)  # 2 x 40% spread
    assert calm["preemptions"] == 5.0 and noisy["preemptions"] == 7.0
    pricer_noise = tolerances(
        _repeats([1.0] * 3, [1.0] * 3, [5] * 3, [5] * 3), profile_sims=[_figs(s, 0, 0) for s in (0.9, 1.0, 1.1)]
    )
    assert pricer_noise["jct_mean_s"] == pytest.approx(0.4)


def test_judge_passes_a_matching_simulator_and_fails_each_broken_figure() -> None:
    good = _repeats([1.0, 1.05, 0.95], [1.02, 1.0, 1.0], [5, 6, 5], [6, 5, 7])
    assert judge(good)["verdict"] == "pass"
    # a load burst in one repeat: the median error and the spread absorb it
    assert judge(_repeats([1.0, 1.6, 1.0], [1.0, 1.1, 1.0], [5, 6, 5], [5, 6, 5]))["verdict"] == "pass"
    for broken, figure in (
        (_repeats([1.0] * 3, [1.0] * 3, [5, 6, 5], [25, 30, 20]), "preemptions"),
        (_repeats([1.0] * 3, [1.0] * 3, [5, 6, 5], [5, 6, 5], fcfs_sim=0.7), "admission_fcfs"),
        (_repeats([1.0] * 3, [1.4] * 3, [5, 6, 5], [5, 6, 5]), "jct_mean_s"),
    ):
        res = judge(broken)
        assert res["verdict"] == "fail"
        assert figure in {c["figure"] for c in res["checks"] if not c["ok"]}
    hits = copy.deepcopy(good)
    hits[1]["sim"]["cached_tokens"] = 1400.0
    assert judge(hits)["verdict"] == "fail"
    few = copy.deepcopy(good)
    for r in few:  # the engine hardly queued: its order is not measured, and says so; the rest still judges
        r["real"]["admission_pairs"] = 5.0
    order = {c["figure"]: c for c in judge(few)["checks"]}["admission_fcfs"]
    assert order["ok"] and not order["measured"] and "not measured" in order["statistic"]
    few[0]["sim"]["preemptions"] = 30.0
    assert judge(few)["verdict"] == "fail"
    sim_few = copy.deepcopy(good)
    for r in sim_few:  # the engine queued, the simulator did not: a failure of the simulator
        r["sim"]["admission_pairs"] = 5.0
    assert judge(sim_few)["verdict"] == "fail"
    noisy_engine = copy.deepcopy(good)  # 30 engine pairs, 3 of them inverted: within the tolerance
    for r in noisy_engine:
        r["real"]["admission_pairs"], r["real"]["admission_fcfs"] = 10.0, 0.7 if r is noisy_engine[0] else 1.0
    assert {c["figure"]: c for c in judge(noisy_engine)["checks"]}["admission_fcfs"]["ok"]


def test_judge_needs_three_repeats() -> None:
    with pytest.raises(ValueError, match=">= 3 repeats"):
        judge(_repeats([1.0] * 2, [1.0] * 2, [0, 0], [0, 0]))


# ---- the committed engine session -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def committed() -> tuple[object, dict]:
    if not COMMITTED.exists():
        pytest.skip(f"{COMMITTED} not committed")
    spec = importlib.util.spec_from_file_location("vllm_cpu_validate", ROOT / "benchmarks" / "vllm_cpu" / "validate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod, json.loads(COMMITTED.read_text())


def test_committed_session_is_three_repeats_and_passes(committed) -> None:
    v, rep = committed
    assert len(rep["repeats"]) >= 3 and rep["check"]["verdict"] == "pass"
    (sim,) = v.resimulate(rep)  # no client paths recorded then: one simulation for every repeat
    for k, x in rep["sim"].items():
        assert sim[k] == pytest.approx(x, rel=1e-9, nan_ok=True), k
    assert v.judge_sim(rep, sim)["verdict"] == "pass"


@pytest.mark.parametrize(
    ("broken", "figure"),
    [
        ({"reserve_full_isl": False}, "preemptions"),
        ({"queue": "program-fcfs"}, "admission_fcfs"),
        ({"queue": "plas"}, "admission_fcfs"),
    ],
)
def test_a_wrong_scheduler_fails_the_check_on_the_committed_session(committed, broken, figure) -> None:
    v, rep = committed
    res = v.judge_sim(rep, v.resimulate(rep, **broken), tol=rep["check"]["tolerances"])
    assert res["verdict"] == "fail"
    assert figure in {c["figure"] for c in res["checks"] if not c["ok"]}


def test_report_rows_carry_the_spread(committed) -> None:
    _, rep = committed
    df = rows([COMMITTED])
    assert len(df) and df["note"].str.contains("3 repeats|repeats in one engine session").all()
    jct = df.set_index("metric").loc["jct_mean_s"]
    assert jct["measured"] == rep["comparison"]["rows"]["jct_mean_s"]["real"]


# ---- the client path (HTTP, API server, driver), measured per turn and replayed ---------------------------------
def _drive_of(v, w, lag_in: float, lag_out: float, engine_ttft: float = 0.01, decode: float = 0.05):
    """A fabricated drive of workload ``w``: every turn spends ``lag_in`` before the engine and ``lag_out`` after
    its first and its last token, on the driver's clock; the engine reports ``engine_ttft`` and ``decode``."""
    import types

    import pandas as pd

    rows, t = [], 0.0
    for p, pid in enumerate(w.program_ids):
        for k in range(w.n_turns_of(p)):
            first = t + lag_in + engine_ttft + lag_out
            rows.append(
                {
                    "program_id": pid,
                    "turn_idx": k,
                    "release_s": t,
                    "first_token_s": first,
                    "last_token_s": first + decode,
                    "engine_queue_s": 0.0,
                    "engine_ttft_s": engine_ttft,
                    "engine_decode_s": decode,
                }
            )
            t = first + decode + 1.0
    return types.SimpleNamespace(turns=pd.DataFrame(rows))


def test_client_path_is_the_drivers_time_the_engine_did_not_see(committed) -> None:
    v, _ = committed
    w = v.prepare_workload(
        v.read_trace(v.TRACE), v.WorkloadConfig(arrival="closed", concurrency=2, max_programs=2), 0.05
    )
    path = v.client_path(_drive_of(v, w, lag_in=0.02, lag_out=0.03))
    assert len(path["first_s"]) == w.n_turns
    assert np.allclose(path["first_s"], 0.05) and np.allclose(path["total_s"], 0.05)
    old = _drive_of(v, w, 0.02, 0.03)
    old.turns = old.turns.drop(columns="engine_decode_s")  # a sidecar from before the decode interval was kept
    assert v.client_path(old) is None


def test_the_replayed_client_path_lengthens_each_tool_gap_and_is_added_back(committed) -> None:
    v, rep = committed
    cell = v.Cell(**{**rep["cell"], "programs": 1, "concurrency": 1})
    w = v.prepare_workload(
        v.read_trace(v.TRACE), v.WorkloadConfig(arrival="closed", concurrency=1, max_programs=1), cell.token_scale
    )
    path = v.client_path(_drive_of(v, w, lag_in=0.1, lag_out=0.15))  # 0.25 s a turn
    replayed = v.with_client_path(w, path, cell.tool_scale)
    last = np.zeros(w.n_turns, dtype=bool)
    last[w.turn_start[1:] - 1] = True
    assert np.allclose(replayed.tool_s[~last], w.tool_s[~last] * cell.tool_scale + 0.25)
    assert np.isnan(replayed.tool_s[last]).all()
    pricer = v.ProfilePricer(v.PricerCoeffs(**rep["pricer"]["coeffs"]))
    plain = v.run_sim(cell, rep["engine"], pricer, None)
    res = v.run_sim(cell, rep["engine"], pricer, None, client=path)
    figs, base = v.sim_figures(res, path), v.sim_figures(plain)
    # one program alone: each turn's engine time is the same with or without the client path, so its JCT grows
    # by 0.25 s per turn (n - 1 replayed before the engine, 1 added back)
    n = np.diff(w.turn_start)
    assert figs["jct_mean_s"] == pytest.approx(base["jct_mean_s"] + 0.25 * n.mean(), rel=1e-6)
    assert figs["ttft_mean_s"] == pytest.approx(base["ttft_mean_s"] + 0.25, rel=1e-6)  # first_s = in + out
    with pytest.raises(ValueError, match="no measured turn 1"):
        v.with_client_path(w, {k: x[:1] for k, x in path.items()}, cell.tool_scale)
