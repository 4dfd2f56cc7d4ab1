"""The live-engine cell group: simulator vs a real engine driven with the same trajectories.

``benchmarks/vllm_cpu/validate.py`` runs a real vLLM (CPU build), replays a subset of the bundled SWE-bench
Verified programs against it with ``agentreplay drive``, simulates the same cell with the engine's block count,
limits, admission rule and a pricer fitted on the engine's own profile, and writes the comparison as JSON
(``{"cell": ..., "engine": ..., "comparison": {"rows": {metric: {"real", "sim", "err"}}}}``). This module turns
such files into rows of the validation report (source ``live-<engine>``, role validation), so every number in the
report still comes from data: the committed ``reports/live/*.json`` are those runs' outputs.

It also holds the live cell's protocol (the check CI applies), so a committed run can be re-judged without an
engine (``tests/validation/e2e/test_live_check.py``):

- One engine session, ``R >= 3`` repeats. Before each repeat the engine is profiled and its prefix cache reset.
  The simulator is priced by one pricer fitted on all the session's profiles together (the same loaded machine,
  interleaved with the drives), scaled by one speed factor, the engine's TPOT over the simulator's, both on the
  engine's clock (other jobs slow the drives differently from the profile's lone requests:
  benchmarks/vllm_cpu/validate.py::speed_factor), so TPOT is fixed by construction and not judged.
- **Client path**: what a turn spends outside the engine (HTTP, the API server, the driver, sharing a core) is
  measured per turn from vLLM's per-request metrics and replayed before each simulated turn, each repeat simulated
  with its own (``validate.client_path``); the simulator models the engine, and this path, 8-20% of a program's JCT
  on the 2-core machine, is not what the check is about. Sessions recorded without the engine's decode interval
  have one simulation, judged against every repeat.
- **Spread**: the engine's own spread over the repeats (``(max - min) / median``) is the noise floor.
- **Timing** (JCT mean / p50 / p90, TTFT, TPOT, makespan): the median over repeats of ``|sim / real - 1|`` must be
  within ``max(floor, TIMING_K x the engine's spread in this session, TIMING_K x the spread of the simulator priced
  by the leave-one-profile-out pricers)``: load that moves the engine or the profile widens the tolerance instead of
  failing the check, and one disturbed repeat cannot fail it alone.
- **Logic** (tight; hits and preemptions every repeat): prefix-cache hit tokens at first admission (relative
  error within ``max(HIT_FLOOR, 2 x the engine's spread)``), preemptions (``|sim - real| <= max(PREEMPT_FLOOR_ABS,
  the engine's range over repeats)``) and admission order (of the pairs of requests that waited in the queue
  together, the fraction admitted in queue order, over all repeats: sim vs engine within ``ORDER_TOL``;
  :func:`admission_order`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: metrics of the comparison JSON that are rows of the report (``turns`` is a consistency check, not a metric)
METRICS = (
    "jct_mean_s",
    "jct_p50_s",
    "jct_p90_s",
    "ttft_mean_s",
    "tpot_mean_s",
    "makespan_s",
    "cached_tokens",
    "preemptions",
)
TIMING = ("jct_mean_s", "jct_p50_s", "jct_p90_s", "ttft_mean_s", "tpot_mean_s", "makespan_s")

# ---- the protocol's constants (measured numbers: benchmarks/vllm_cpu/README.md §5) -----------------------------
MIN_REPEATS = 3
#: timing tolerance = max(floor, TIMING_K x the engine's relative range over the session's repeats, TIMING_K x the
#: relative range of the leave-one-profile-out simulations). K = 2: a range of 3 draws underestimates the spread.
#: The floors are hand-set (whole-run times 15%, per-token 35%); neither bound in the two recorded sessions, whose
#: measured terms gave 28-50% (steady load) and 85-141% (load rising 80% during the session).
TIMING_K = 2.0
TIMING_FLOOR = {
    "jct_mean_s": 0.15,
    "jct_p50_s": 0.15,
    "jct_p90_s": 0.15,
    "makespan_s": 0.15,
    "ttft_mean_s": 0.35,
    "tpot_mean_s": 0.35,
}
#: prefix-cache hit tokens: relative error of every repeat within max(HIT_FLOOR, 2 x the engine's spread, 2 x the
#: leave-one-out range). Which blocks LRU evicts depends on the interleaving, so the simulator's count moves with the
#: pricer: with the engine's rule its worst error per session was 4-30% over seven sessions (17.8% in G, where the
#: engine's own range was 2.8%); the floor is set at that cross-session level, so the check catches gross errors
#: (program-arrival order: +21% to +77%), not the interleaving
HIT_FLOOR = 0.25
#: preemptions: |sim - real| of every repeat within max(PREEMPT_FLOOR_ABS, the engine's range, the leave-one-out
#: simulations' range). Small counts are chaotic on both sides: the engine preempted 0-4 times a repeat in the ``ci``
#: cell over five sessions, and the simulator's count went 3 -> 0 when one session's pricer was scaled by 0.998, so
#: two such counts differ by up to 4; the first-chunk admission rule preempts 12-25 times more than the engine.
PREEMPT_FLOOR_ABS = 5.0
#: admission order: pairs that waited together in the engine's queue for at least this long ...
ORDER_MIN_OVERLAP_S = 0.05
#: ... and entered the queue and were admitted at least this far apart: the engine's times are estimated on the
#: driver's clock (first token's arrival minus vLLM's per-request durations), so they carry the API server's
#: delivery lag, which under load flipped pairs closer than this (benchmarks/vllm_cpu/README.md §5)
ORDER_TIE_S = 0.1
#: the fraction of such pairs admitted in queue order (FCFS) over all repeats, sim vs engine: |difference| <= this.
#: Pooled, because a repeat may have only 7-20 pairs. Over seven sessions the engine read 0.912-1.000 (0-3 inverted
#: pairs of 34-244; not explained, see benchmarks/vllm_cpu/README.md §5), the simulator 1.000; program-arrival order
#: reads 0.16-0.31, PLAS 0.67-0.72
ORDER_TOL = 0.15
#: ... judged only with at least this many such pairs (all repeats) on each side (else the cell does not queue)
ORDER_MIN_PAIRS = 20


# ---- admission order ---------------------------------------------------------------------------------------------
def admission_order(
    arrive: np.ndarray, admit: np.ndarray, *, min_overlap_s: float = ORDER_MIN_OVERLAP_S, tie_s: float = ORDER_TIE_S
) -> dict[str, float]:
    """How one run ordered its admissions: of the pairs of requests that waited in the scheduler's queue together
    for at least ``min_overlap_s`` and entered it and were admitted at least ``tie_s`` apart, the fraction
    admitted in the order they entered the queue (``fcfs``; NaN without pairs) and their number (``pairs``).

    Engine side: ``arrive`` = entering the engine core's queue, ``admit`` = first scheduled (a preemption does not
    move it: ``vllm/v1/metrics/stats.py``), from vLLM's per-request metrics. vLLM's default policy admits FCFS and
    stops at the first request that does not fit (``vllm/v1/core/sched/scheduler.py::Scheduler.schedule``:
    ``break`` when ``allocate_slots`` returns None), so the engine should read ~1. Simulator side: release and
    ``first_scheduled_s`` of its turn records (the decision log's admissions). The two runs' timelines drift apart
    by seconds, so pairs are compared within a run (is the rule the same?), not across runs.
    """
    a, b = np.asarray(arrive, dtype=float), np.asarray(admit, dtype=float)
    if len(a) != len(b) or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError(
            "admission order: every turn needs an arrival and an admission time (engine without "
            "--enable-per-request-metrics?)"
        )
    i, j = np.triu_indices(len(a), k=1)
    overlap = np.minimum(b[i], b[j]) - np.maximum(a[i], a[j])
    d_admit = b[i] - b[j]
    keep = (overlap >= min_overlap_s) & (np.abs(d_admit) >= tie_s) & (np.abs(a[i] - a[j]) >= tie_s)
    n = int(keep.sum())
    fcfs = float(np.mean(np.sign(d_admit[keep]) == np.sign(a[i][keep] - a[j][keep]))) if n else math.nan
    return {"pairs": float(n), "fcfs": fcfs, "queued": float(np.sum(b - a >= min_overlap_s))}


# ---- spread, tolerances, verdict ---------------------------------------------------------------------------------
def spread(values: list[float]) -> dict[str, float]:
    """``min, max, median`` and ``rel_range = (max - min) / median`` of one figure over the repeats."""
    x = np.asarray(values, dtype=float)
    med = float(np.median(x))
    return {
        "min": float(x.min()),
        "max": float(x.max()),
        "median": med,
        "rel_range": float((x.max() - x.min()) / med) if med else 0.0,
    }


def tolerances(repeats: list[dict[str, Any]], profile_sims: list[dict[str, float]] | None = None) -> dict[str, float]:
    """The check's tolerances for one session, from the engine's spread over its repeats and the spread of the
    simulator priced by leave-one-profile-out pricers (``profile_sims``: the pricer's noise, which moves the
    simulated interleaving, hence its hits and preemptions, as well as its times)."""
    real = {k: spread([r["real"][k] for r in repeats]) for k in (*TIMING, "cached_tokens", "preemptions")}
    prof = {
        k: spread([f[k] for f in profile_sims]) if profile_sims else spread([0.0])
        for k in (*TIMING, "cached_tokens", "preemptions")
    }
    tol = {k: max(TIMING_FLOOR[k], TIMING_K * real[k]["rel_range"], TIMING_K * prof[k]["rel_range"]) for k in TIMING}
    tol["cached_tokens"] = max(
        HIT_FLOOR, 2.0 * real["cached_tokens"]["rel_range"], 2.0 * prof["cached_tokens"]["rel_range"]
    )
    tol["preemptions"] = max(
        PREEMPT_FLOOR_ABS,
        real["preemptions"]["max"] - real["preemptions"]["min"],
        prof["preemptions"]["max"] - prof["preemptions"]["min"],
    )
    tol["admission_fcfs"] = ORDER_TOL
    return tol


def _err(sim: float, real: float) -> float:
    return (sim - real) / real if real else (0.0 if sim == real else math.inf)


def judge(
    repeats: list[dict[str, Any]],
    tol: dict[str, float] | None = None,
    profile_sims: list[dict[str, float]] | None = None,
    fixed: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Checks and verdict (``pass`` / ``fail``) for a session's repeats, each ``{"real": figures, "sim": figures}``
    (figures include ``admission_fcfs`` / ``admission_pairs`` from :func:`admission_order`). ``tol`` defaults to
    :func:`tolerances` of the same repeats (and ``profile_sims``). ``fixed``: timing figures the simulation was
    calibrated on (not judged; listed as such)."""
    if len(repeats) < MIN_REPEATS:
        raise ValueError(f"the live check needs >= {MIN_REPEATS} repeats, got {len(repeats)}")
    tol = tol or tolerances(repeats, profile_sims)
    checks = []
    for k in (k for k in TIMING if k not in fixed):
        errs = [_err(r["sim"][k], r["real"][k]) for r in repeats]
        value = float(np.median(np.abs(errs)))
        checks.append(
            {
                "figure": k,
                "kind": "timing",
                "statistic": "median |err| over repeats",
                "value": value,
                "per_repeat": errs,
                "tolerance": tol[k],
                "ok": value <= tol[k],
            }
        )
    errs = [_err(r["sim"]["cached_tokens"], r["real"]["cached_tokens"]) for r in repeats]
    value = float(np.max(np.abs(errs)))
    checks.append(
        {
            "figure": "cached_tokens",
            "kind": "logic",
            "statistic": "max |err| over repeats",
            "value": value,
            "per_repeat": errs,
            "tolerance": tol["cached_tokens"],
            "ok": value <= tol["cached_tokens"],
        }
    )
    diffs = [r["sim"]["preemptions"] - r["real"]["preemptions"] for r in repeats]
    value = float(np.max(np.abs(diffs)))
    checks.append(
        {
            "figure": "preemptions",
            "kind": "logic",
            "statistic": "max |sim - real| over repeats",
            "value": value,
            "per_repeat": diffs,
            "tolerance": tol["preemptions"],
            "ok": value <= tol["preemptions"],
        }
    )
    real_n, real_f = _pooled([r["real"] for r in repeats])
    sim_n, sim_f = _pooled([r["sim"] for r in repeats])
    # The engine's admission order is only observable when its requests queued together: on a fast, quiet
    # machine a session can queue fewer than ORDER_MIN_PAIRS pairs (CI saw 8). The order is then not measured on
    # that session (said in the check, never counted as a pass of the order itself); a simulator that queues
    # too few pairs while the engine queued enough fails.
    measured = real_n >= ORDER_MIN_PAIRS
    few = sim_n < ORDER_MIN_PAIRS
    value = math.inf if few or not math.isfinite(sim_f - real_f) else abs(sim_f - real_f)
    order_tol = tol["admission_fcfs"]
    checks.append(
        {
            "figure": "admission_fcfs",
            "kind": "logic",
            "statistic": f"|sim - real| over all repeats' pairs (>= {ORDER_MIN_PAIRS} pairs each side; "
            f"engine {real_f:.3f} of {real_n:.0f}, sim {sim_f:.3f} of {sim_n:.0f})"
            + ("" if measured else "; not measured: the engine queued too few pairs"),
            "value": value if measured else math.nan,
            "per_repeat": [r["sim"]["admission_fcfs"] - r["real"]["admission_fcfs"] for r in repeats],
            "tolerance": order_tol,
            "measured": measured,
            "ok": (value <= order_tol) if measured else True,
        }
    )
    return {
        "tolerances": tol,
        "checks": checks,
        "fixed_by_construction": list(fixed),
        "verdict": "pass" if all(c["ok"] for c in checks) else "fail",
    }


def _pooled(figs: list[dict[str, float]]) -> tuple[float, float]:
    """``(pairs, fraction in queue order)`` over several runs' queued-together pairs."""
    n = np.array([f["admission_pairs"] for f in figs], dtype=float)
    x = np.array([f["admission_fcfs"] for f in figs], dtype=float)
    ok = n > 0
    return float(n.sum()), float(np.sum(n[ok] * x[ok]) / n.sum()) if n.sum() else math.nan


def summary_rows(repeats: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{metric: {"real", "sim", "err"}}`` from the medians over repeats (the report's row format)."""
    out = {}
    for k in (*METRICS, "turns"):
        r = float(np.median([x["real"][k] for x in repeats]))
        s = float(np.median([x["sim"][k] for x in repeats]))
        out[k] = {"real": r, "sim": s, "err": _err(s, r)}
    return out


# ---- the session report as Markdown -----------------------------------------------------------------------
ROWS: tuple[tuple[str, str], ...] = (
    ("jct_mean_s", "JCT mean (s)"),
    ("jct_p50_s", "JCT p50 (s)"),
    ("jct_p90_s", "JCT p90 (s)"),
    ("ttft_mean_s", "TTFT mean (s)"),
    ("tpot_mean_s", "TPOT mean (s)"),
    ("engine_tpot_mean_s", "TPOT mean, engine's clock (s)"),
    ("makespan_s", "makespan (s)"),
    ("cached_tokens", "prefix-cache hit tokens (first admission)"),
    ("preemptions", "preemptions"),
    ("turns", "turns"),
    ("queued_turns", "turns queued >= 50 ms"),
    ("admission_pairs", "pairs queued together (>= 50 ms)"),
    ("admission_fcfs", "of those, admitted in queue order"),
)


def markdown(report: dict[str, Any]) -> str:
    c, e, reps = report["cell"], report["engine"], report["repeats"]
    lines = [
        f"# vLLM CPU validation: preset {report['preset']}, {len(reps)} repeats in one engine session",
        "",
        f"engine: vLLM {e['version']} CPU, {e['num_gpu_blocks']} blocks x {e['block_size']} tokens "
        f"({e['num_gpu_blocks'] - 1} usable), max_num_seqs {e['max_num_seqs']}, max_num_batched_tokens "
        f"{e['max_num_batched_tokens']}, max_model_len {e['max_model_len']}, reserve_full_isl "
        f"{c['reserve_full_isl']}",
        "",
        f"cell: first {c['programs']} programs of swebench-verified, closed loop x{c['concurrency']}, "
        f"token scale {c['token_scale']}, tools scale {c['tool_scale']}",
        "",
        f"session pricer (all profiles): {report['pricer_repr']}, x speed factor "
        f"{report.get('speed_factor', 1.0):.3f} (engine TPOT, on its own clock where recorded, / simulator TPOT at "
        f"the profile's speed; TPOT is then fixed by construction and not judged); at speed 1 the check reads "
        f"{report.get('check_unscaled', {}).get('verdict', '?')}",
        "",
    ]
    if report.get("client_path_replayed"):
        per = []
        for i, r in enumerate(reps):
            x = np.asarray(r["client_path"]["total_s"], dtype=float)
            per.append(
                f"{i}: mean {x.mean() * 1e3:.0f} ms, median {np.median(x) * 1e3:.0f} ms, "
                f"p99 {np.quantile(x, 0.99) * 1e3:.0f} ms"
            )
        lines += [
            "client path (HTTP, API server, driver: a turn's time on the driver's clock that the engine's own "
            "per-request metrics do not cover), measured per turn and replayed before each simulated turn, each "
            "repeat simulated with its own; the pricer then charges no per-request overhead; per repeat: "
            + "; ".join(per),
            "",
        ]
    prof = report.get("profile_sims") or []
    head = " | ".join(f"engine {i}" for i in range(len(reps)))
    phead = " | ".join(f"sim, profiles but {i}" for i in range(len(prof)))
    lines += [
        f"| figure | {head} | engine spread | sim | wrong rule | {phead} |",
        "| --- |" + " ---: |" * (len(reps) + 3 + len(prof)),
    ]
    for key, label in ROWS:
        fmt = (
            "{:.0f}"
            if key in ("cached_tokens", "preemptions", "turns", "admission_pairs", "queued_turns")
            else "{:.3f}"
        )
        if key not in reps[0]["real"]:  # a figure recorded since (engine_tpot_mean_s)
            continue
        cells = " | ".join(fmt.format(r["real"][key]) for r in reps)
        sp = report["spread"].get(key) or spread([r["real"][key] for r in reps])
        pc = " | ".join(fmt.format(f.get(key, math.nan)) for f in prof)
        lines.append(
            f"| {label} | {cells} | {sp['rel_range'] * 100:.1f}% | {fmt.format(report['sim'].get(key, math.nan))} | "
            f"{fmt.format(report['broken_rule']['sim'].get(key, math.nan))} | {pc} |"
        )
    for name in ("check", "broken_rule", "broken_order"):
        chk = report[name]
        lines += [
            "",
            f"**{name}** ({chk.get('label', '')}): **{chk['verdict']}**",
            "",
            "| figure | statistic | value | tolerance | ok | per repeat |",
            "| --- | --- | ---: | ---: | --- | --- |",
        ]
        for k in chk["checks"]:
            per = ", ".join(f"{v:+.3g}" for v in k["per_repeat"])
            lines.append(
                f"| {k['figure']} | {k['statistic']} | {k['value']:.3g} | {k['tolerance']:.3g} | "
                f"{'yes' if k['ok'] else 'NO'} | {per} |"
            )
    lines += [
        "",
        "leave-one-out pricers: " + "; ".join(report["loo_pricers_repr"]),
        "",
        "per-profile pricers: " + "; ".join(f"{i}: {r}" for i, r in enumerate(report["profile_pricers_repr"])),
        f"wall time: {report['timings_s']}",
    ]
    return "\n".join(lines) + "\n"


# ---- report rows -------------------------------------------------------------------------------------------------
def rows(paths: list[Path]) -> pd.DataFrame:
    """Error rows (validation module columns) from live comparison JSON files; unreadable files raise."""
    out = []
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
            cell, engine, comp = data["cell"], data["engine"], data["comparison"]["rows"]
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{p}: not a live comparison file ({exc})") from exc
        cell_id = (
            f"live-vllm-cpu/{data.get('preset', 'cell')}/{cell['programs']}prog-x{cell['concurrency']}"
            f"-tok{cell['token_scale']}-blocks{cell['num_gpu_blocks']}"
        )
        note = (
            f"vLLM {engine.get('version', '?')} CPU build, tiny dummy Llama; {cell['programs']} programs, tokens "
            f"x{cell['token_scale']}, tool gaps x{cell['tool_scale']}, {cell['concurrency']} in flight, "
            f"{cell['num_gpu_blocks']} blocks of {cell['block_size']}, reserve_full_isl="
            f"{cell.get('reserve_full_isl', True)}"
        )
        reps = data.get("repeats")
        if reps:
            note += (
                f"; median of {len(reps)} repeats in one engine session (each priced by its own profile); "
                f"check {data.get('check', {}).get('verdict', '?')}"
            )
        for metric in METRICS:
            if metric in comp and comp[metric]["real"]:
                row = {
                    "source": "live-vllm-cpu",
                    "cell_id": cell_id,
                    "gpu": "cpu",
                    "model": "tiny-llama",
                    "dtype": "bf16",
                    "tp": 1,
                    "metric": metric,
                    "measured": float(comp[metric]["real"]),
                    "simulated": float(comp[metric]["sim"]),
                    "role": "validation",
                    "note": note,
                }
                if reps:
                    sp = spread([r["real"][metric] for r in reps])
                    row["note"] = note + (
                        f"; engine over repeats {sp['min']:.4g}-{sp['max']:.4g} (spread {sp['rel_range'] * 100:.1f}%)"
                    )
                out.append(row)
    return pd.DataFrame(out)


def default_paths() -> list[Path]:
    """``reports/live/*.json`` under the working directory, if any."""
    d = Path("reports") / "live"
    return sorted(d.glob("*.json")) if d.is_dir() else []
