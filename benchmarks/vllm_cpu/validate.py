"""Validate the simulator against a real vLLM engine (CPU build, tiny dummy-weight Llama) on this machine.

One engine session: start ``python -m vllm.entrypoints.openai.api_server`` from the vLLM virtualenv
(``.ci/vllm_cpu.sh`` makes it); then, ``--repeats`` times (default 3), reset its prefix cache, profile it with the
live profiler, reset again and replay a subset of the bundled SWE-bench Verified programs against it with the live
driver (closed loop, tool gaps scaled, token counts scaled); stop it. Fit one
:class:`collectors.live.engine_profile_pricer.ProfilePricer` on all the session's profiles, simulate the cell with
it and the engine's KV geometry and batching limits, once per repeat with that repeat's measured client path
(HTTP, API server, driver) replayed before each turn, and judge the simulator against every repeat with
:mod:`validation.e2e.live`'s protocol (tolerances from the engine's spread over the repeats and the pricer's
leave-one-profile-out spread; logic figures tight). The same check is applied to the simulator with a wrong
admission rule and a wrong queue order, which must fail it. See ``benchmarks/vllm_cpu/README.md``.

    python benchmarks/vllm_cpu/validate.py --preset ci --out /tmp/vci          # the integration test's session
    python benchmarks/vllm_cpu/validate.py --preset full --repeats 3 --out /tmp/vf  # the larger, slower cell
    python benchmarks/vllm_cpu/validate.py --refresh reports/live/vllm-cpu-ci.json  # re-judge a recorded session

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
from benchmarks.vllm_cpu.engine import (  # noqa: E402
    PRESETS,
    Cell,
    add_cell_options,
    cell_from,
    engine_facts,
    venv_python,
    vllm_server,
)
from benchmarks.vllm_cpu.figures import (  # noqa: E402
    client_path,
    engine_admissions,
    live_figures,
    sim_figures,
    with_client_path,
)
from collectors.live.driver import drive, prepare_workload  # noqa: E402
from collectors.live.endpoint import DriveOptions  # noqa: E402
from collectors.live.engine_profile_pricer import PricerCoeffs, ProfilePricer  # noqa: E402
from collectors.live.profile import ProfileOptions, profile  # noqa: E402
from validation.e2e import live as live_check  # noqa: E402

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


def judge_session(report: dict[str, Any], out: Path | None, timings: dict[str, float], t1: float) -> None:
    """The simulator with the session's scaled pricer, with the engine's rule and with each wrong scheduler, judged
    against every repeat (``report`` gains ``sim``, ``check``, ``broken_rule``, ``broken_order`` and the rest);
    ``timings`` gains the simulations' wall time since ``t1``."""
    reps = report["repeats"]
    sims = resimulate(report, out=out)
    report["sim_repeats"], report["sim"] = sims, median_figures(sims)
    cell = Cell(**report["cell"])
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


def refresh(report: dict[str, Any]) -> dict[str, Any]:
    """A recorded session re-judged with the current simulator, no engine: the simulator side is re-derived from
    the recorded repeats and session pricer (speed factor included); the leave-one-profile-out simulations
    (``profile_sims``, part of the tolerances) stay as recorded, since their pricers' coefficients were not kept."""
    report = json.loads(json.dumps(report))
    pricer = ProfilePricer(PricerCoeffs(**report["pricer"]["coeffs"]))
    report["sim_unscaled"] = median_figures(simulate_repeats(report, pricer))
    report["speed_factor"] = speed_factor(report["repeats"], report["sim_unscaled"])
    timings = dict(report.get("timings_s", {}))
    judge_session(report, None, timings, time.monotonic())
    report["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    return report


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
    judge_session(report, out / "sim", timings, t1)
    report["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    (out / "report.json").write_text(dumps(report))
    (out / "report.md").write_text(markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="the session's folder (report.json, report.md, ...)")
    ap.add_argument(
        "--refresh",
        type=Path,
        default=None,
        metavar="REPORT",
        help="re-judge a recorded session's report.json with the current simulator (no engine; written back)",
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), default="ci")
    ap.add_argument("--repeats", type=int, default=3, help="drives of the cell in the one engine session (>= 3)")
    ap.add_argument(
        "--python", type=Path, default=None, help=f"vLLM venv's python (default: %(default)s -> {venv_python()})"
    )
    add_cell_options(ap)
    a = ap.parse_args(argv)
    if a.refresh is not None:
        report = refresh(json.loads(a.refresh.read_text()))
        a.refresh.write_text(dumps(report))
        print(markdown(report))
        return 0 if report["check"]["verdict"] == "pass" else 1
    if a.out is None:
        ap.error("--out is required (or --refresh REPORT)")
    cell = cell_from(a, a.preset)
    report = run_validation(a.out, cell, python=a.python, preset=a.preset, repeats=a.repeats)
    print(markdown(report))
    return 0 if report["check"]["verdict"] == "pass" else 1


if __name__ == "__main__":
    raise SystemExit(main())
