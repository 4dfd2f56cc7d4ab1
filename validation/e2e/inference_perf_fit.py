"""The engine's cost beyond the kernels, fitted end to end on inference-perf runs, and scored out of configuration.

What is fitted (:class:`EngineCost`), each a term no kernel profile shows:

- per engine step, ``fixed_ms`` + ``per_seq_us`` x scheduled sequences (:class:`agentreplay.perf.stepcost.
  StepCost`: vLLM v1's ``Scheduler.schedule`` / ``update_from_output``, ``GPUModelRunner._prepare_inputs``
  and ``OutputProcessor`` bookkeeping);
- the sampler, ``sampler_bytes_per_logit``: per emitting sequence, its passes over the fp32 logits priced as that
  many bytes per vocabulary entry at the GPU's streaming bandwidth. vLLM v1's ``Sampler`` (vllm/v1/sample/
  sampler.py, ops/topk_topp_sampler.py) runs eagerly, outside the CUDA graph: ``logits.to(float32)``, the
  temperature, ``softmax``, exponential noise, the division and ``argmax`` (plus a greedy ``argmax`` in mixed
  batches), row-wise kernels that stream far below the bandwidth at decode batch sizes. The catalogue's 8 (one
  read and one write) leaves a per-sequence cost that grows with the vocabulary: without this term every 32k-vocab
  configuration (Llama-2, CodeLlama, Mixtral) was priced slow and every 128k-202k one (Llama-3.1, Qwen3, Llama-4)
  fast, in sample and out of configuration;
- the deployment's kernels as vLLM runs them (``[hardware] deployment_kernels``: batches padded to the CUDA-graph
  capture sizes vLLM derives from the run's limits, TP all-reduces by vLLM's custom P2P all-reduce on NVLink,
  :mod:`agentreplay.perf.deploy`), with ``kernel_gap_us`` per kernel (the gap between kernels of a replayed
  graph; the catalogue's value was fitted on eagerly launched HF modules). vLLM's paged decode attention streams the
  KV cache from HBM as the decode GEMVs stream the weights, so its efficiency is tied to the GPU's fitted
  ``bandwidth_efficiency`` (``attn_decode_efficiency`` None) instead of fitted here: only the one MHA model's runs
  (Llama-2-7B: 4x the KV bytes a token of the GQA models) identify it, so left out it is extrapolated from the
  others. The custom all-reduce's fixed cost keeps the catalogue's hand-set value (``custom_allreduce_us`` None).
  Either may be freed (``fit(terms=...)``, :data:`OPTIONAL_TERMS`); what that gave is in
  docs/explanation/performance-model.md;
- on the client path, ``client_ttft_ms`` per request before its first token reaches the client (HTTP, the API
  server's tokenisation, the hand-off to the engine core, the first chunk) and ``client_token_us`` per further
  output token (detokenisation and stream delivery), added to TTFT and E2E as inference-perf times them.

How: every replayable run of the calibration configurations is simulated with a candidate engine cost (stages
capped at ``cap_s`` seconds of arrivals each, a steady state at these constant rates; the report replays whole
runs), and the loss is the mean squared log ratio simulated / measured over :data:`FIT_METRICS` of every stage cell
(so 10% weighs the same on every metric and run). The client terms do not change what the engine schedules, so for
each engine candidate they are solved in an inner minimisation over the replays already made; the engine terms are
searched by bounded Nelder-Mead (``scipy.optimize.minimize``) from the catalogue values.

**Out of configuration** (:func:`leave_one_out`): for each (GPU, model, TP) configuration the whole fit is re-run
without any of its runs, and that configuration's cells are then scored with the values so fitted: the figure
the report headlines. The in-sample fit (all configurations) is what ships in ``catalog/engine_cost.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from agentreplay.perf import PerfModel, load_gpu, load_model
from agentreplay.perf.catalog import Efficiency
from agentreplay.perf.deploy import default_cudagraph_sizes
from agentreplay.perf.engine_cost import ENGINE_COST, TERM_FIELDS, apply_terms
from validation.catalog import PACKAGED, Catalog
from validation.e2e import inference_perf as ip

#: Metrics the fit matches: those the issue's targets name (TTFT mean, E2E mean and p90, per-token time).
FIT_METRICS: Final = ("ttft_mean_s", "e2e_mean_s", "e2e_p90_s", "itl_mean_s")
#: (lower, upper) of each fitted term, in its unit.
BOUNDS: Final = {
    "fixed_ms": (0.0, 20.0),
    "per_seq_us": (0.0, 500.0),
    "kernel_gap_us": (0.0, 20.0),
    "client_ttft_ms": (0.0, 200.0),
    "client_token_us": (0.0, 1000.0),
    "client_lag_steps": (0.0, 4.0),
    "attn_decode_efficiency": (0.3, 1.0),
    "custom_allreduce_us": (0.0, 30.0),
    "sampler_bytes_per_logit": (0.0, 4000.0),
}
#: The engine terms fitted by default.
ENGINE_TERMS: Final = ("fixed_ms", "per_seq_us", "kernel_gap_us", "sampler_bytes_per_logit")
#: Engine terms a fit may free on top (``calibrate --engine-cost --fit-terms``); the shipped fit leaves them at the
#: GPU catalogue's values (see the module docstring for why, and docs/explanation/performance-model.md for what
#: freeing them gave on the development runs).
OPTIONAL_TERMS: Final = ("attn_decode_efficiency", "custom_allreduce_us")
CLIENT_TERMS: Final = ("client_ttft_ms", "client_token_us", "client_lag_steps")


@dataclass(frozen=True, slots=True)
class EngineCost:
    fixed_ms: float = 0.5  #: per engine step, ms
    per_seq_us: float = 0.0  #: per scheduled sequence per step, us
    kernel_gap_us: float = 5.441  #: per kernel of a replayed CUDA graph, us (catalogue h100-sxm value)
    client_ttft_ms: float = 0.0  #: per request before its first token reaches the client, ms
    client_token_us: float = 0.0  #: per output token after the first on the client path, us
    client_lag_steps: float = 0.0  #: engine steps between a token's step and its delivery to the client
    #: paged decode attention, fraction of HBM bandwidth; None = the GPU's bandwidth_efficiency (tied, not fitted)
    attn_decode_efficiency: float | None = None
    #: fixed cost of one of vLLM's custom all-reduces, us; None = the GPU catalogue's ``custom_allreduce_latency_us``
    #: (hand-set from vLLM PR #24111's benchmark, not fitted)
    custom_allreduce_us: float | None = None
    #: the sampler's traffic per logit, bytes; None = the GPU catalogue's ``sampler_bytes_per_logit``
    sampler_bytes_per_logit: float | None = None

    def efficiency(self, eff: Efficiency) -> Efficiency:
        """``eff`` with the fitted engine terms in place (:func:`agentreplay.perf.engine_cost.apply_terms`, the
        mapping a simulation with ``[hardware] engine_cost = "fitted"`` uses)."""
        return apply_terms(eff, self.as_dict())

    def value(self, term: str, eff: Efficiency) -> float:
        """The value of ``term`` this cost prices with on a GPU of efficiencies ``eff`` (a tied term: the GPU's)."""
        return float(getattr(self.efficiency(eff), TERM_FIELDS[term]))

    @classmethod
    def of(cls, eff: Efficiency) -> EngineCost:
        """The catalogue's values for a GPU (no client path)."""
        return cls(eff.framework_overhead_ms, eff.per_seq_overhead_us, eff.kernel_overhead_us)

    def client(self) -> ip.ClientPath:
        return ip.ClientPath(self.client_ttft_ms * 1e-3, self.client_token_us * 1e-6, self.client_lag_steps)

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def _engine_cost_json(catalog: Catalog) -> dict[str, Any] | None:
    """``catalog``'s ``engine_cost.json`` as written by :func:`write_engine_cost`, None when it has none."""
    p = catalog.file(ENGINE_COST)
    return json.loads(p.read_text()) if p.exists() else None


def load(catalog: Catalog = PACKAGED) -> EngineCost | None:
    """The fitted engine cost ``catalog`` holds (its ``engine_cost.json``), None when there is none."""
    data = _engine_cost_json(catalog)
    return None if data is None else _cost(data["fitted"])


def _cost(d: dict[str, Any]) -> EngineCost:
    """An EngineCost from its JSON (null = tied, as :class:`EngineCost` documents)."""
    return EngineCost(**{k: None if v is None else float(v) for k, v in d.items() if k in EngineCost.__slots__})


@dataclass
class Run:
    """One replayable run: a representative cell, its config, its cells (one per stage / window)."""

    name: str
    configuration: str
    cell: dict[str, Any]
    cfg: dict[str, Any]
    cells: list[dict[str, Any]]


def runs_from(tables: dict[str, pd.DataFrame]) -> tuple[list[Run], list[tuple[str, str]]]:
    """Replayable runs of the inference-perf source, and (cell, reason) of the cells that are not: ``not
    replayable: ...`` (an overloaded run) or ``not simulated: ...`` (a GPU, model, precision or deployment the
    simulator cannot price or hold, e.g. a held-out run of a model outside the catalogue: named, never replaced)."""
    cells = tables["cells"]
    cells = cells[cells["source"] == ip.SOURCE]
    runs: dict[str, Run] = {}
    apart: list[tuple[str, str]] = []
    unpriceable: dict[str, str] = {}
    for _, c in cells.iterrows():
        cfg = ip.run_config(c)
        if not cfg.get("replayable", True):
            apart.append((c["cell_id"], f"not replayable: {cfg.get('not_replayable', '')}"))
            continue
        if cfg["run"] not in runs and cfg["run"] not in unpriceable:
            why = _unpriceable(c, cfg)
            if why:
                unpriceable[cfg["run"]] = why
        if cfg["run"] in unpriceable:
            apart.append((c["cell_id"], f"not simulated: {unpriceable[cfg['run']]}"))
            continue
        run = runs.setdefault(cfg["run"], Run(cfg["run"], ip.configuration(c), c.to_dict(), cfg, []))
        run.cells.append(c.to_dict())
    return list(runs.values()), apart


def _unpriceable(cell: pd.Series, cfg: dict[str, Any]) -> str:
    """Why the run's deployment cannot be simulated ('' when it can): its pricer and KV plan are built once."""
    if not isinstance(cell["gpu"], str):
        return f"GPU {cell['gpu_raw']!r} is not in the catalogue"
    try:
        pricer(cell.to_dict(), cfg, EngineCost())
        ip.sim_config(cell, cfg)
    except (ValueError, KeyError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def pricer(cell: dict[str, Any], cfg: dict[str, Any], cost: EngineCost) -> PerfModel:
    """The run's pricer: its GPU, model, dtype and TP, vLLM's deployment kernels, ``cost``'s engine terms."""
    gpu = load_gpu(cell["gpu"])
    sizes = default_cudagraph_sizes(gpu, int(cfg["max_num_seqs"]), int(cfg["max_num_batched_tokens"]))
    return PerfModel(
        gpu,
        load_model(cell["model"]),
        ip._DTYPES[str(cell["dtype"]).lower()],
        int(cell["tp"]),
        efficiency=cost.efficiency(gpu.efficiency),
        cudagraph_sizes=sizes,
        custom_allreduce=True,
    )


def _replay_one(args: tuple[dict[str, Any], dict[str, Any], EngineCost, float | None]) -> ip.RunReplay:
    cell, cfg, cost, cap_s = args
    if cap_s is not None:
        cfg = {**cfg, "stages": [[r, min(d, cap_s)] for r, d in cfg["stages"]]}
    return ip.replay_run(pd.Series(cell), cfg, pricer(cell, cfg, cost))


def replay_runs(
    runs: Sequence[Run], cost: EngineCost, *, cap_s: float | None = None, processes: int | None = None
) -> dict[str, ip.RunReplay]:
    """Every run simulated once with ``cost``'s engine terms (in parallel when ``processes`` > 1)."""
    args = [(r.cell, r.cfg, cost, cap_s) for r in runs]
    n = processes if processes is not None else min(len(args), os.cpu_count() or 1)
    if n <= 1:
        out = [_replay_one(a) for a in args]
    else:
        with ProcessPoolExecutor(n) as ex:
            out = list(ex.map(_replay_one, args))
    return {r.name: rep for r, rep in zip(runs, out, strict=True)}


def rows(
    runs: Sequence[Run],
    replays: dict[str, ip.RunReplay],
    tables: dict[str, pd.DataFrame],
    cost: EngineCost,
    role: str = "validation",
) -> list[dict[str, Any]]:
    out = []
    for r in runs:
        for c in r.cells:
            out.extend(ip.cell_rows(pd.Series(c), replays[r.name], tables, cost.client(), role))
    return out


def _stage_cells(run: Run) -> list[dict[str, Any]]:
    return [c for c in run.cells if ip.is_stage_cell(json.loads(c["config_json"]))]


def _prepared(
    runs: Sequence[Run], replays: dict[str, ip.RunReplay], tables: dict[str, pd.DataFrame], *, warm: bool = False
) -> list:
    """Per stage cell: (engine ttft, engine e2e, output tokens, measured metrics), for the inner client fit.

    ``warm``: leave out each run's first P requests (P = the prompt pool), which find no prompt cached: in a run
    capped to ``cap_s`` seconds a stage they would weigh up to a fifth, in the whole run about 2%."""
    out = []
    for r in runs:
        rep = replays[r.name]
        sp = r.cfg["shared_prefix"]
        cold = int(sp["num_groups"]) * int(sp["num_prompts_per_group"]) if warm else 0
        for c in _stage_cells(r):
            cfg = json.loads(c["config_json"])
            meas = ip._metrics(tables, c["cell_id"])
            mask = ip._window(rep.arrival, rep.stage_of, cfg)
            mask[: min(cold, len(mask))] = False
            if not mask.any():
                continue
            out.append((rep.ttft_s[mask], rep.e2e_s[mask], rep.output_tokens, meas))
    return out


def _loss(prepared: list, client: ip.ClientPath) -> float:
    errs = []
    for ttft, e2e, out_tokens, meas in prepared:
        sim = ip.simulated_metrics(ttft, e2e, out_tokens, meas, client)
        errs.extend(math.log(sim[m] / meas[m]) for m in FIT_METRICS if m in meas and sim[m] > 0)
    return float(np.mean(np.square(errs))) if errs else math.inf


def fit_client(prepared: list, start: EngineCost) -> tuple[dict[str, float], float]:
    """The client terms minimising the loss over the replays already made, and that loss."""

    def f(x: np.ndarray) -> float:
        return _loss(prepared, ip.ClientPath(x[0] * 1e-3, x[1] * 1e-6, x[2]))

    x0 = np.array([getattr(start, k) for k in CLIENT_TERMS])
    bounds = [BOUNDS[k] for k in CLIENT_TERMS]
    simplex = np.vstack([x0, x0 + np.diag([10.0, 20.0, 0.5])])
    res = minimize(
        f,
        x0,
        method="Nelder-Mead",
        bounds=bounds,
        options={"xatol": 0.01, "fatol": 1e-8, "maxfev": 600, "initial_simplex": simplex},
    )
    return dict(zip(CLIENT_TERMS, (float(v) for v in res.x), strict=True)), float(res.fun)


@dataclass
class FitOutcome:
    cost: EngineCost
    loss: float
    evaluations: int
    configurations: list[str]


def fit(
    runs: Sequence[Run],
    tables: dict[str, pd.DataFrame],
    *,
    start: EngineCost | None = None,
    cap_s: float | None = 120.0,
    processes: int | None = None,
    max_evals: int = 40,
    log: Callable[[str], None] | None = None,
    terms: Sequence[str] = ENGINE_TERMS,
) -> FitOutcome:
    """Fit the engine ``terms`` and the client terms of :class:`EngineCost` on ``runs`` (see the module docstring);
    a term not in ``terms`` keeps its value in ``start`` (default: the GPU catalogue's)."""
    names = check_terms(terms)
    eff = load_gpu(runs[0].cell["gpu"]).efficiency
    start = start or EngineCost.of(eff)
    evals = 0
    best: dict[str, Any] = {"loss": math.inf, "cost": start}

    def f(x: np.ndarray) -> float:
        nonlocal evals
        evals += 1
        engine = dict(zip(names, (float(v) for v in x), strict=True))
        cand = dataclasses.replace(best["cost"], **engine)
        reps = replay_runs(runs, cand, cap_s=cap_s, processes=processes)
        client, loss = fit_client(_prepared(runs, reps, tables, warm=cap_s is not None), cand)
        cand = dataclasses.replace(cand, **client)
        if loss < best["loss"]:
            best.update(loss=loss, cost=cand)
        if log:
            log(f"  eval {evals}: {cand} loss {loss:.5f}")
        return loss

    x0 = np.array([start.value(k, eff) for k in names])
    minimize(
        f,
        x0,
        method="Nelder-Mead",
        bounds=[BOUNDS[k] for k in names],
        options={"maxfev": max_evals, "xatol": 0.02, "fatol": 1e-6, "initial_simplex": _simplex(x0, names)},
    )
    return FitOutcome(best["cost"], best["loss"], evals, sorted({r.configuration for r in runs}))


def check_terms(terms: Sequence[str]) -> tuple[str, ...]:
    """``terms`` as a tuple, each a fittable engine term once; ValueError naming the rest."""
    allowed = (*ENGINE_TERMS, *OPTIONAL_TERMS)
    bad = [t for t in terms if t not in allowed]
    if bad or not terms or len(set(terms)) != len(terms):
        raise ValueError(f"engine terms to fit {list(terms)!r}: each once, from {list(allowed)}")
    return tuple(terms)


def _simplex(x0: np.ndarray, names: Sequence[str]) -> np.ndarray:
    steps = {
        "fixed_ms": 1.0,
        "per_seq_us": 20.0,
        "kernel_gap_us": 2.0,
        "attn_decode_efficiency": -0.1,
        "custom_allreduce_us": 3.0,
        "sampler_bytes_per_logit": 100.0,
    }
    pts = [x0]
    for i, k in enumerate(names):
        p = x0.copy()
        lo, hi = BOUNDS[k]
        p[i] = p[i] + steps[k] if lo <= p[i] + steps[k] <= hi else p[i] - steps[k]
        pts.append(p)
    return np.array(pts)


def leave_one_out(
    runs: Sequence[Run], tables: dict[str, pd.DataFrame], say: Callable[[str], None] | None = None, **kw: Any
) -> dict[str, FitOutcome]:
    """Per configuration: the fit on every other configuration's runs, from the catalogue's values as the in-sample
    fit (its optimum has seen the left-out configuration); ``say`` hears each fit begin and end."""
    say = say or (lambda _s: None)
    out = {}
    for conf in sorted({r.configuration for r in runs}):
        say(f"fit without {conf}")
        out[conf] = fit([r for r in runs if r.configuration != conf], tables, **kw)
        say(f"  {out[conf].cost} loss {out[conf].loss:.5f}")
    return out


def write_engine_cost(outcome: FitOutcome, loo: dict[str, FitOutcome], catalog: Catalog, **meta: Any) -> Path:
    """Write ``catalog``'s ``engine_cost.json``: the in-sample fit with its provenance and the per-configuration
    out-of-configuration fits. Returns the path written."""
    data = {
        "what": "engine cost beyond the kernels and the client path, fitted end to end "
        "(validation/e2e/inference_perf_fit.py)",
        "fitted": outcome.cost.as_dict(),
        "loss": outcome.loss,
        "evaluations": outcome.evaluations,
        "configurations": outcome.configurations,
        "leave_one_configuration_out": {k: v.cost.as_dict() for k, v in loo.items()},
        **meta,
    }
    return catalog.write(ENGINE_COST, json.dumps(data, indent=1, sort_keys=True) + "\n")


def load_out_of_configuration(catalog: Catalog = PACKAGED) -> dict[str, EngineCost]:
    """The engine cost fitted without each (GPU, model, TP) configuration, keyed by configuration, that
    ``catalog`` holds ({} when it has none)."""
    data = _engine_cost_json(catalog) or {}
    return {k: _cost(v) for k, v in data.get("leave_one_configuration_out", {}).items()}


def calibrate(
    tables: dict[str, pd.DataFrame],
    *,
    catalog: Catalog = PACKAGED,
    cap_s: float | None = 90.0,
    processes: int | None = None,
    max_evals: int = 40,
    log: Callable[[str], None] | None = None,
    sources: Sequence[str] = (),
    terms: Sequence[str] = ENGINE_TERMS,
) -> tuple[FitOutcome, dict[str, FitOutcome]]:
    """The in-sample fit on every replayable run, one fit per left-out configuration, written into ``catalog``
    (its ``engine_cost.json``); ``terms``: the engine terms fitted (:func:`check_terms`)."""
    terms = check_terms(terms)
    runs, apart = runs_from(tables)
    if not runs:
        raise ValueError("no replayable inference-perf run in the measured sources")
    confs = sorted({r.configuration for r in runs})
    if len(confs) < 2:  # each configuration's headline is the fit without it
        raise ValueError(
            f"the engine cost is fitted with each (GPU, model, TP) configuration left out in turn, which needs runs "
            f"of at least two configurations; the measured sources hold only {confs[0]}"
        )
    say = log or (lambda _s: None)
    say(f"in-sample fit on {len(runs)} runs of {len({r.configuration for r in runs})} configurations")
    full = fit(runs, tables, cap_s=cap_s, processes=processes, max_evals=max_evals, terms=terms)
    say(f"  {full.cost} loss {full.loss:.5f}")
    loo = leave_one_out(runs, tables, say, cap_s=cap_s, processes=processes, max_evals=max_evals, terms=terms)
    write_engine_cost(
        full,
        loo,
        catalog,
        runs=sorted(r.name for r in runs),
        apart=[{"cell_id": c, "reason": r} for c, r in apart],
        sources=list(sources),
        cap_s=cap_s,
        max_evals=max_evals,
        fit_metrics=list(FIT_METRICS),
        fit_terms=list(terms),
    )
    return full, loo
