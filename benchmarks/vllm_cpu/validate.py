"""Validate the simulator against a real vLLM engine (CPU build, tiny dummy-weight Llama) on this machine.

One engine session: start ``python -m vllm.entrypoints.openai.api_server`` from the vLLM virtualenv
(``.ci/vllm_cpu.sh`` makes it); then, ``--repeats`` times (default 3), reset its prefix cache, profile it with the
live profiler, reset again and replay a subset of the bundled SWE-bench Verified programs against it with the live
driver (closed loop, tool gaps scaled, token counts scaled); stop it. Fit one
:class:`collectors.live.engine_profile_pricer.ProfilePricer` on all the session's profiles, simulate the cell with
it and the engine's KV geometry and batching limits, once per repeat with that repeat's measured client path
(HTTP, API server, driver) replayed before each turn, and judge the simulator against every repeat with
:mod:`validation.live`'s protocol (tolerances from the engine's spread over the repeats and the pricer's
leave-one-profile-out spread; logic figures tight). The same check is applied to the simulator with a wrong
admission rule and a wrong queue order, which must fail it. See ``benchmarks/vllm_cpu/README.md``.

    python benchmarks/vllm_cpu/validate.py --preset ci --out /tmp/vci          # the integration test's session
    python benchmarks/vllm_cpu/validate.py --preset full --repeats 3 --out /tmp/vf  # the larger, slower cell

Writes ``OUT/report.json`` and ``OUT/report.md`` (engine repeats, simulator, spread, checks), ``OUT/repN/profile/``
(measured component tables), ``OUT/repN/live/`` (measured runs), ``OUT/sim/repN/`` (simulator output) and
``OUT/server.log``. Exit status 1 when the check fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from agentreplay.sim.config import SimConfig, ToolConfig, WorkloadConfig  # noqa: E402
from agentreplay.sim.run import simulate  # noqa: E402
from agentreplay.trace.io import read_trace  # noqa: E402
from benchmarks.vllm_cpu.engine import PRESETS, Cell, engine_facts, venv_python, vllm_server  # noqa: E402
from collectors.live.driver import drive, prepare_workload  # noqa: E402
from collectors.live.endpoint import DriveOptions  # noqa: E402
from collectors.live.engine_profile_pricer import PricerCoeffs, ProfilePricer  # noqa: E402
from collectors.live.profile import ProfileOptions, profile  # noqa: E402
from validation import live as live_check  # noqa: E402

TRACE = ROOT / "datasets" / "swebench-verified"


# ---- the three measurements ------------------------------------------------------------------------------------
def profile_options(cell: Cell) -> ProfileOptions:
    """Prefill sizes up to the context limit (median of 5 each); decode batches 1-8, each twice, at contexts that
    fit the KV cache 8 times."""
    top = cell.max_model_len - 1
    prefill = tuple(sorted({n for n in (16, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096) if n <= top}))
    dec_tokens = 32
    per_seq = cell.usable_tokens // 8 - dec_tokens - cell.block_size
    contexts = tuple(sorted({c for c in (64, per_seq // 4, per_seq // 2, per_seq) if c >= 32}))
    return ProfileOptions(
        prefill_sizes=prefill,
        repeats=5,
        batch_sizes=(1, 2, 4, 8, 1, 2, 4, 8),
        contexts=contexts,
        decode_tokens=dec_tokens,
    )


def run_profile(url: str, out: Path, cell: Cell) -> pd.DataFrame:
    """The profile's component table (fit it with ``ProfilePricer.from_component``)."""
    opts = DriveOptions(gpu="cpu (vLLM CPU backend)", metrics_interval_s=0.0, seed=cell.seed)
    return profile(url, out, options=opts, profile=profile_options(cell)).tables["component"]


def run_live(url: str, out: Path, cell: Cell) -> Any:
    cfg = WorkloadConfig(arrival="closed", concurrency=cell.concurrency, max_programs=cell.programs)
    opts = DriveOptions(
        token_scale=cell.token_scale,
        seed=cell.seed,
        metrics_interval_s=1.0,
        gpu="cpu (vLLM CPU backend)",
        workload_label=TRACE.name,
    )
    return drive(url, read_trace(TRACE), cfg, out, tools=ToolConfig(mode="scale", scale=cell.tool_scale), options=opts)


def sim_config(cell: Cell, facts: dict[str, Any]) -> SimConfig:
    """The simulator's view of the engine: its usable blocks (vLLM reserves one null block), block size and
    batching limits; the workload is already head + scaled, so ``max_programs`` stays unset."""
    cfg = SimConfig().replace(
        cache={
            "block_size": facts["block_size"],
            "num_gpu_blocks": facts["num_gpu_blocks"] - 1,
            "enable_prefix_caching": True,
        },
        scheduler={
            "max_num_seqs": facts["max_num_seqs"],
            "max_num_batched_tokens": facts["max_num_batched_tokens"],
            "reserve_full_isl": cell.reserve_full_isl,
        },
        workload={"arrival": "closed", "concurrency": cell.concurrency},
        tools={"mode": "scale", "scale": cell.tool_scale},
    )
    return dataclasses.replace(cfg, seed=cell.seed)


def run_sim(
    cell: Cell,
    facts: dict[str, Any],
    pricer: ProfilePricer,
    out: Path | None,
    *,
    queue: str | None = None,
    client: dict[str, list[Any]] | None = None,
) -> Any:
    """Simulate ``cell`` (its ``reserve_full_isl`` is the simulator's admission rule) with ``pricer``; ``queue``
    replaces the waiting-queue order (``[policy] queue``; vLLM's is ``fcfs``); ``client``: a repeat's measured
    client path (:func:`client_path`), replayed before each turn (:func:`with_client_path`)."""
    cfg0 = WorkloadConfig(arrival="closed", concurrency=cell.concurrency, max_programs=cell.programs)
    w = prepare_workload(read_trace(TRACE), cfg0, cell.token_scale)  # the driver's exact workload
    cfg = sim_config(cell, facts)
    if client is not None:
        w = with_client_path(w, client, cell.tool_scale)
        cfg = cfg.replace(tools={"mode": "replay", "scale": 1.0})
    if queue is not None:
        cfg = cfg.replace(policy={"queue": queue})
    res = simulate(w, cfg, perf=pricer)
    if out is not None:
        res.write(out)
    return res


def reset_prefix_cache(url: str) -> None:
    """Empty the engine's prefix cache (``POST /reset_prefix_cache``, served with VLLM_SERVER_DEV_MODE=1), so every
    repeat starts from the same cache state; vLLM refuses while blocks are in use."""
    r = httpx.post(f"{url}/reset_prefix_cache", timeout=30.0)
    if r.status_code != 200 or not r.json().get("success"):
        raise RuntimeError(f"{url}/reset_prefix_cache answered {r.status_code}: {r.text[:200]}")


# ---- the client path -------------------------------------------------------------------------------------------
def client_path(live: Any) -> dict[str, list[Any]] | None:
    """Per turn of a drive, the time the engine did not see (seconds), from vLLM's per-request metrics:

    - ``first_s``: release -> first token on the driver's clock minus the engine's queue and scheduled -> first
      token (the request's way in plus the first token's way out);
    - ``total_s``: release -> last token minus the engine's queue, scheduled -> first token and decode interval.

    This is HTTP, the API server and the driver, which share one of the machine's two cores (and other jobs'
    load); the simulator models an engine, not them. Measured with the engine core deprioritized (3 December
    2026, README §5c): a mean 26-43 ms a turn on a quiet machine (median 7-9 ms, p99 0.22-0.66 s), 54-81 ms under
    one competing busy process (median 22-35 ms, p99 0.3-0.97 s): 8-20% of a program's JCT, more than the engine's
    own TTFT. None when a turn lacks the metrics (an older sidecar)."""
    t = live.turns
    cols = ("engine_queue_s", "engine_ttft_s", "engine_decode_s")
    if any(c not in t for c in cols):
        return None
    q, f, d = (pd.to_numeric(t[c]).to_numpy(dtype=float) for c in cols)
    rel = t["release_s"].to_numpy(dtype=float)
    first = t["first_token_s"].to_numpy(dtype=float) - rel - q - f
    total = t["last_token_s"].to_numpy(dtype=float) - rel - q - f - d
    if not (np.isfinite(first).all() and np.isfinite(total).all()):
        return None
    return {
        "program_id": t["program_id"].astype(str).tolist(),
        "turn_idx": t["turn_idx"].astype(int).tolist(),
        "first_s": np.round(np.maximum(first, 0.0), 6).tolist(),
        "total_s": np.round(np.maximum(total, 0.0), 6).tolist(),
    }


def with_client_path(w: Any, client: dict[str, list[Any]], tool_scale: float) -> Any:
    """The workload with each turn's measured client path replayed: turn k > 0 of a program reaches the engine
    ``total_s`` of that turn after the scaled tool gap that precedes it (so the gap array becomes the replayed
    gaps: tools mode ``replay``, scale 1). All of a turn's client path is placed before the engine sees it; its
    real split (the request's way in, the tokens' way out) is not measured, and only moves it within the turn.
    A program's first turn reaches the engine at once; :func:`sim_figures` adds its client path to the JCT."""
    tot = {(p, k): x for p, k, x in zip(client["program_id"], client["turn_idx"], client["total_s"], strict=True)}
    tool = np.asarray(w.tool_s, dtype=float) * tool_scale
    for p, pid in enumerate(w.program_ids):
        lo, hi = int(w.turn_start[p]), int(w.turn_start[p + 1])
        for k in range(1, hi - lo):
            if (pid, k) not in tot:
                raise ValueError(f"client path: no measured turn {k} of program {pid!r} in the drive")
            tool[lo + k - 1] += tot[(pid, k)]
    return dataclasses.replace(w, tool_s=tool)


# ---- comparison ------------------------------------------------------------------------------------------------
def _stats(x: np.ndarray) -> dict[str, float]:
    x = x[np.isfinite(x)]
    return {"mean": float(x.mean()), "p50": float(np.quantile(x, 0.5)), "p90": float(np.quantile(x, 0.9))}


def live_figures(live: Any) -> dict[str, float]:
    t = live.turns
    out = t["output_tokens"].to_numpy(dtype=float)
    first, last = t["first_token_s"].to_numpy(dtype=float), t["last_token_s"].to_numpy(dtype=float)
    multi = out > 1
    m = dict(zip(live.tables["metrics"]["metric"], live.tables["metrics"]["value"], strict=True))
    jct = live.tables["programs"]["jct_s"].to_numpy(dtype=float)
    arrival = t.groupby("program_id")["release_s"].min()
    finish = t.groupby("program_id")["last_token_s"].max()
    # the engine's own decode interval per turn (vLLM's per-request metrics; absent from older sidecars)
    dec = pd.to_numeric(t["engine_decode_s"]).to_numpy(dtype=float) if "engine_decode_s" in t else None
    engine_tpot = (
        float(np.mean(dec[multi] / (out[multi] - 1)))
        if dec is not None and multi.any() and np.isfinite(dec[multi]).all()
        else math.nan
    )
    return {
        **{f"jct_{k}_s": v for k, v in _stats(jct).items()},
        "ttft_mean_s": float(np.mean(first - t["release_s"].to_numpy(dtype=float))),
        "tpot_mean_s": float(np.mean((last[multi] - first[multi]) / (out[multi] - 1))),
        "engine_tpot_mean_s": engine_tpot,
        "makespan_s": float(finish.max() - arrival.min()),
        "cached_tokens": float(pd.to_numeric(t["cached_tokens_reported"]).fillna(0).sum()),
        "engine_hit_tokens": float(m.get("prefix_cache_hit_tokens", math.nan)),
        "engine_query_tokens": float(m.get("prefix_cache_query_tokens", math.nan)),
        "preemptions": float(m.get("preemptions", math.nan)),
        "turns": float(len(t)),
        **_order(engine_admissions(live)),
    }


def sim_figures(sim: Any, client: dict[str, list[Any]] | None = None) -> dict[str, float]:
    """The simulator's figures; with a replayed ``client`` path (:func:`with_client_path`) a turn's TTFT (from the
    moment the simulated engine saw it) gains its ``first_s``, and a program's JCT its first turn's ``total_s``
    (the one not replayed before the engine)."""
    t, p = sim.turns, sim.programs
    tpot = float(np.nanmean(t["tpot_s"].to_numpy(dtype=float)))
    ttft = t["ttft_s"].to_numpy(dtype=float)
    jct = p["jct_s"].to_numpy(dtype=float)
    if client is not None:
        key = list(zip(client["program_id"], client["turn_idx"], strict=True))
        first = dict(zip(key, client["first_s"], strict=True))
        total = dict(zip(key, client["total_s"], strict=True))
        ttft = ttft + np.array([first[(a, int(b))] for a, b in zip(t["program_id"], t["turn_idx"], strict=True)])
        jct = jct + np.array([total[(a, 0)] for a in p["program_id"]])
    return {
        **{f"jct_{k}_s": v for k, v in _stats(jct).items()},
        "ttft_mean_s": float(np.nanmean(ttft)),
        "tpot_mean_s": tpot,
        "engine_tpot_mean_s": tpot,  # the simulator has no API server: its one clock is the engine's
        "makespan_s": float(sim.summary["makespan_s"]),
        "cached_tokens": float(t["cached_tokens"].sum()),
        "engine_hit_tokens": math.nan,
        "engine_query_tokens": math.nan,
        "preemptions": float(t["preemptions"].sum()),
        "turns": float(len(t)),
        **_order(pd.DataFrame({"arrive_s": t["release_s"], "admit_s": t["first_scheduled_s"]})),
    }


def _order(adm: pd.DataFrame) -> dict[str, float]:
    o = live_check.admission_order(adm["arrive_s"].to_numpy(dtype=float), adm["admit_s"].to_numpy(dtype=float))
    return {"admission_fcfs": o["fcfs"], "admission_pairs": o["pairs"], "queued_turns": o["queued"]}


def engine_admissions(live: Any) -> pd.DataFrame:
    """Per turn, on the driver's clock: entering the engine core's queue and first scheduling. vLLM reports first
    scheduled -> first token and queued -> first scheduled (``--enable-per-request-metrics``, from
    ``RequestStateStats``; a preemption does not move ``scheduled_ts``: ``vllm/v1/metrics/stats.py``), so
    admission = the first token's arrival minus the former, arrival = admission minus the latter."""
    t = live.turns
    admit = t["first_token_s"].to_numpy(dtype=float) - pd.to_numeric(t["engine_ttft_s"]).to_numpy(dtype=float)
    return pd.DataFrame(
        {
            "program_id": t["program_id"].astype(str),
            "turn_idx": t["turn_idx"].astype(int),
            "arrive_s": admit - pd.to_numeric(t["engine_queue_s"]).to_numpy(dtype=float),
            "admit_s": admit,
        }
    )


#: a deliberately wrong queue order for the check to catch: admit by program arrival (Autellix's baseline), not
#: vLLM's FCFS over requests
WRONG_QUEUE = "program-fcfs"


def speed_factor(reps: list[dict[str, Any]], sim: dict[str, float]) -> float:
    """The machine's speed during the drives relative to the pricer's profile: the engine's mean TPOT (median over
    the repeats) over the simulator's. The profile's lone requests and fixed decode batches are slowed differently
    by other jobs than the drives are (the unscaled simulator was 3-34% fast in five sessions, more on a calmer
    machine), so the pricer is scaled by this one number and TPOT becomes fixed by construction, not judged.

    The engine's TPOT is read on its own clock (``engine_tpot_mean_s``: vLLM's per-request decode interval) when
    every repeat has it, as the simulator's is (it has no API server); else on the driver's (older sessions)."""
    return float(np.median([engine_tpot(r["real"]) for r in reps]) / sim["tpot_mean_s"])


def engine_tpot(real: dict[str, float]) -> float:
    """A repeat's mean TPOT on the engine's clock where recorded, else on the driver's."""
    x = real.get("engine_tpot_mean_s", math.nan)
    return float(x) if math.isfinite(x) else float(real["tpot_mean_s"])


def scaled(pricer: ProfilePricer, k: float) -> ProfilePricer:
    return ProfilePricer(PricerCoeffs(**{n: x * k for n, x in dataclasses.asdict(pricer.coeffs).items()}))


Figures = dict[str, float]


def clients(report: dict[str, Any]) -> list[dict[str, list[Any]] | None]:
    """The repeats' measured client paths when every repeat has one (then each repeat is simulated with its own,
    replayed), else ``[None]``: one simulation without a client path, judged against every repeat (sessions
    recorded before the engine's per-request decode interval was)."""
    paths = [r.get("client_path") for r in report["repeats"]]
    return paths if paths and all(p is not None for p in paths) else [None]


def median_figures(figs: list[Figures]) -> Figures:
    """Per figure, the median over several simulations (one per repeat)."""
    return {k: float(np.median([f[k] for f in figs])) for k in figs[0]}


def simulate_repeats(
    report: dict[str, Any],
    pricer: ProfilePricer,
    *,
    reserve_full_isl: bool | None = None,
    queue: str | None = None,
    out: Path | None = None,
) -> list[Figures]:
    """The simulator's figures per repeat (one simulation per repeat's client path; one in all without them)."""
    cell = Cell(**report["cell"])
    if reserve_full_isl is not None:
        cell = dataclasses.replace(cell, reserve_full_isl=reserve_full_isl)
    paths = clients(report)
    return [
        sim_figures(
            run_sim(
                cell,
                report["engine"],
                pricer,
                None if out is None else (out if len(paths) == 1 else out / f"rep{i}"),
                queue=queue,
                client=c,
            ),
            c,
        )
        for i, c in enumerate(paths)
    ]


def resimulate(
    report: dict[str, Any], *, reserve_full_isl: bool | None = None, queue: str | None = None, out: Path | None = None
) -> list[Figures]:
    """Re-simulate a report's cell with its session pricer at its speed factor (no engine needed), optionally with
    another admission rule or queue order (a deliberately broken scheduler); returns the simulator's figures per
    repeat (one list entry for all of them in sessions without client paths)."""
    pricer = scaled(ProfilePricer(PricerCoeffs(**report["pricer"]["coeffs"])), report.get("speed_factor", 1.0))
    return simulate_repeats(report, pricer, reserve_full_isl=reserve_full_isl, queue=queue, out=out)


def judge_sim(
    report: dict[str, Any],
    sim: list[Figures] | Figures,
    *,
    tol: dict[str, float] | None = None,
    fixed: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """The live check of simulator figures against every engine repeat of ``report``: ``sim`` per repeat, or one
    list entry / one dict for all; ``fixed``: figures not judged (default: TPOT when the report's pricer is scaled
    to the drives' speed)."""
    sims = sim if isinstance(sim, list) else [sim]
    if len(sims) == 1:
        sims = sims * len(report["repeats"])
    reps = [{"real": r["real"], "sim": f} for r, f in zip(report["repeats"], sims, strict=True)]
    if fixed is None:
        fixed = ("tpot_mean_s",) if "speed_factor" in report else ()
    return live_check.judge(reps, tol, profile_sims=report.get("profile_sims"), fixed=fixed)


markdown = live_check.markdown  # the session report as Markdown


def dumps(report: dict[str, Any]) -> str:
    """JSON, indented, with every list of plain values on one line (the per-turn admissions stay compact)."""
    text = json.dumps(report, indent=1)
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def run_validation(
    out: Path,
    cell: Cell,
    *,
    python: Path | None = None,
    preset: str = "custom",
    repeats: int = 3,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One engine session: start; per repeat reset the prefix cache, profile, reset again, drive; stop. Then fit
    one pricer on all the profiles, simulate the cell with it (and with the other admission rule), simulate it
    with leave-one-profile-out pricers (the pricer's noise), judge; write OUT/report.json and OUT/report.md."""
    if repeats < live_check.MIN_REPEATS:
        raise ValueError(f"--repeats {repeats}: the live check needs >= {live_check.MIN_REPEATS}")
    out.mkdir(parents=True, exist_ok=True)
    py = Path(python) if python else venv_python()
    if not py.exists():
        raise FileNotFoundError(f"{py} not found: run `bash .ci/vllm_cpu.sh` (or set AGENTREPLAY_VLLM_VENV)")
    timings: dict[str, float] = {}
    comps: list[pd.DataFrame] = []
    reps: list[dict[str, Any]] = []
    t0 = time.monotonic()
    with vllm_server(py, out, cell, log=log) as url:
        timings["startup"] = time.monotonic() - t0
        facts = engine_facts(url, cell)
        log(f"engine: {facts}")
        for i in range(repeats):
            rt: dict[str, float] = {}
            t1 = time.monotonic()
            reset_prefix_cache(url)
            comps.append(run_profile(url, out / f"rep{i}" / "profile", cell))
            rt["profile"] = round(time.monotonic() - t1, 1)
            t1 = time.monotonic()
            reset_prefix_cache(url)
            live = run_live(url, out / f"rep{i}" / "live", cell)
            rt["drive"] = round(time.monotonic() - t1, 1)
            adm = engine_admissions(live)
            reps.append(
                {
                    "real": live_figures(live),
                    "client_path": client_path(live),
                    "timings_s": rt,
                    "engine_admissions": {
                        k: [round(x, 4) if isinstance(x, float) else x for x in adm[k]] for k in adm.columns
                    },
                }
            )
            log(f"repeat {i}: {rt}, engine JCT mean {reps[-1]['real']['jct_mean_s']:.2f} s")
        timings["engine"] = time.monotonic() - t0
    return assemble(out, cell, facts, comps, reps, timings, preset=preset)


def assemble(
    out: Path,
    cell: Cell,
    facts: dict[str, Any],
    comps: list[pd.DataFrame],
    reps: list[dict[str, Any]],
    timings: dict[str, float],
    *,
    preset: str,
) -> dict[str, Any]:
    """Everything after the engine session (fit, simulate, judge, write): see :func:`run_validation`."""
    t1 = time.monotonic()
    # with the client path measured and replayed, the pricer leaves out the per-request overhead ``p`` it would
    # otherwise charge inside the iteration for HTTP and the API server (a lone request's share of the same path)
    replay = all(r.get("client_path") is not None for r in reps)
    fit = {"per_request_overhead": not replay}
    pricer = ProfilePricer.from_component(pd.concat(comps, ignore_index=True), **fit)
    per = [ProfilePricer.from_component(c, **fit) for c in comps]
    report: dict[str, Any] = {
        "preset": preset,
        "cell": dataclasses.asdict(cell),
        "engine": facts,
        "pricer": pricer.to_dict(),
        "pricer_repr": repr(pricer),
        "profile_pricers": [p.to_dict() for p in per],
        "profile_pricers_repr": [repr(p) for p in per],
        "repeats": reps,
        "client_path_replayed": replay,
    }
    loo = [
        ProfilePricer.from_component(pd.concat(comps[:k] + comps[k + 1 :], ignore_index=True), **fit)
        for k in range(len(comps))
    ]
    report["loo_pricers_repr"] = [repr(p) for p in loo]
    report["sim_unscaled"] = median_figures(simulate_repeats(report, pricer))
    report["speed_factor"] = speed_factor(reps, report["sim_unscaled"])
    report["profile_sims"] = []  # the pricer's noise: leave-one-profile-out pricers, each at its own speed factor
    for p in loo:
        k = speed_factor(reps, median_figures(simulate_repeats(report, p)))
        report["profile_sims"].append(median_figures(simulate_repeats(report, scaled(p, k))))
    sims = resimulate(report, out=out / "sim")
    report["sim_repeats"], report["sim"] = sims, median_figures(sims)
    wrong = not cell.reserve_full_isl
    broken = resimulate(report, reserve_full_isl=wrong)
    broken_order = resimulate(report, queue=WRONG_QUEUE)
    timings["simulate"] = time.monotonic() - t1
    timings["total"] = timings.get("engine", 0.0) + timings["simulate"]
    check = judge_sim(report, sims)
    report["check_unscaled"] = {
        **judge_sim(report, report["sim_unscaled"], tol=check["tolerances"], fixed=()),
        "label": "for information: the simulator at the profile's speed (speed factor 1)",
    }
    report["spread"] = {
        k: live_check.spread([r["real"][k] for r in reps]) for k, _ in live_check.ROWS if k in reps[0]["real"]
    }
    per_rep = sims if len(sims) == len(reps) else sims * len(reps)
    report["comparison"] = {
        "rows": live_check.summary_rows([{"real": r["real"], "sim": f} for r, f in zip(reps, per_rep, strict=True)])
    }
    report["check"] = {**check, "label": f"simulator with the engine's rule (reserve_full_isl={cell.reserve_full_isl})"}
    report["broken_rule"] = {
        **judge_sim(report, broken, tol=check["tolerances"]),
        "sim": median_figures(broken),
        "sim_repeats": broken,
        "label": f"simulator with the wrong admission rule (reserve_full_isl={wrong})",
    }
    report["broken_order"] = {
        **judge_sim(report, broken_order, tol=check["tolerances"]),
        "sim": median_figures(broken_order),
        "sim_repeats": broken_order,
        "label": f"simulator with the wrong queue order ([policy] queue={WRONG_QUEUE})",
    }
    report["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    (out / "report.json").write_text(dumps(report))
    (out / "report.md").write_text(markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="ci")
    ap.add_argument("--repeats", type=int, default=3, help="drives of the cell in the one engine session (>= 3)")
    ap.add_argument(
        "--python", type=Path, default=None, help=f"vLLM venv's python (default: %(default)s -> {venv_python()})"
    )
    for f in dataclasses.fields(Cell):
        kind = type(getattr(PRESETS["full"], f.name))
        if kind is bool:
            ap.add_argument(
                f"--{f.name.replace('_', '-')}",
                type=lambda v: v.lower() in ("1", "true", "yes", "on"),
                default=None,
                metavar="BOOL",
            )
        else:
            ap.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=None)
    a = ap.parse_args(argv)
    cell = dataclasses.replace(
        PRESETS[a.preset],
        **{f.name: getattr(a, f.name) for f in dataclasses.fields(Cell) if getattr(a, f.name) is not None},
    )
    report = run_validation(a.out, cell, python=a.python, preset=a.preset, repeats=a.repeats)
    print(markdown(report))
    return 0 if report["check"]["verdict"] == "pass" else 1


if __name__ == "__main__":
    raise SystemExit(main())
