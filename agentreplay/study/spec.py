"""What the design-space study varies: named policies, the prefix-reuse (eta) transform, the bimodal tool model.

Every study knob is a field of :class:`agentreplay.sim.config.SimConfig`, so each experiment is an ordinary sweep
(:mod:`agentreplay.sweep`) and runs on a local pool or a Dask cluster unchanged.

- **Policies**: a policy is a set of values at the fixed :data:`POLICY_KEYS`; the seven published presets come from
  :data:`agentreplay.policy.presets.PRESETS` (applied to the default config, so a preset that needs a host tier
  gets one), plus three study variants (``continuum-nocap``, ``continuum-code``, ``oracle``).
- **eta** (prefix-reuse ratio) of a trace = sum over turns of ``min(reused_tokens, input_tokens)`` / sum of
  ``input_tokens``: the share of prompt tokens the previous turn's context could serve. The transform sets eta to a
  target by keeping ``k = eta / eta_trace`` of every turn's reused history (``workload.reuse_scale = k``,
  :meth:`agentreplay.sim.workload.Workload.with_reuse_scale`): the rest of that history is re-sent as fresh
  tokens (the prompt length is unchanged; only what it shares with the previous context shrinks).
- **Bimodal tool model**: two lognormal modes fitted (maximum likelihood: mean and sd of log seconds) to draws of
  the *measured* tool model (``datasets/tool-models/claude-code-measured.json``): the fast mode pools the classes
  with a median under one second (read, search, edit, vcs, other), the slow mode the rest (test, build), each class
  weighted by its measured count. Each class of the replayed trace draws from its mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentreplay.policy.presets import PRESETS, apply_preset
from agentreplay.sim.config import SimConfig
from agentreplay.sim.tools_generative import FORMAT, VERSION, ToolSampler, load_tool_model, write_tool_model
from agentreplay.sim.workload import Workload

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "datasets" / "swebench-verified"
MEASURED_TOOLS = ROOT / "datasets" / "tool-models" / "claude-code-measured.json"

#: the config paths a policy sets (every policy sets all of them, so policies can be one [[zip]] group)
POLICY_KEYS = (
    "router.policy",
    "policy.queue",
    "policy.victim",
    "policy.retention",
    "policy.continuum_variant",
    "policy.continuum_max_ttl_s",
    "policy.unpin_on_pressure",
    "tiers.dram_gib",
)
#: "no cap" for Continuum's TTL: longer than any simulated run (a TOML-safe stand-in for infinity), seconds
NO_CAP_S = 1.0e6


def _from_config(cfg: SimConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in POLICY_KEYS:
        section, name = path.split(".")
        out[path] = getattr(getattr(cfg, section), name)
    return out


def _policies() -> dict[str, dict[str, Any]]:
    base = SimConfig()
    out = {name: _from_config(apply_preset(base, name)) for name in PRESETS}
    cont = out["continuum"]
    out["continuum-nocap"] = {**cont, "policy.continuum_max_ttl_s": NO_CAP_S}
    out["continuum-code"] = {**cont, "policy.continuum_variant": "code"}
    out["continuum-strict"] = {**cont, "policy.unpin_on_pressure": False}
    out["oracle"] = {**out["vllm"], "policy.retention": "oracle"}
    # Continuum taken apart: its queue order alone, its retention alone (vllm's router and the rest)
    out["vllm+program-fcfs"] = {**out["vllm"], "policy.queue": "program-fcfs"}
    out["vllm+continuum-ttl"] = {**out["vllm"], "policy.retention": "continuum"}
    return out


#: name -> {config path: value}; ``continuum-nocap``: Continuum's p80 TTL without the 30 s cap;
#: ``continuum-code``: the authors' released rule (pin 2 s when the tool's mean is <= 2 s: a static threshold);
#: ``continuum-strict``: pins are honoured until their TTL (not released when a waiting call needs the memory);
#: ``oracle``: vllm with InferCept's waste rule fed the true gap; ``vllm+program-fcfs`` / ``vllm+continuum-ttl``:
#: vllm with only Continuum's queue order / only its TTL retention
POLICIES: dict[str, dict[str, Any]] = _policies()


def policy_zip(names: list[str]) -> dict[str, list[Any]]:
    """A sweep ``[[zip]]`` table giving the named policies, one row each."""
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ValueError(f"unknown study policy {unknown}; known: {', '.join(POLICIES)}")
    return {path: [POLICIES[n][path] for n in names] for path in POLICY_KEYS}


def config_value(config: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of a config in TOML layout (None where it is not set)."""
    node: Any = config
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def policy_name(config: dict[str, Any]) -> str | None:
    """The study policy a config (TOML layout, as a sweep cell holds it) sets, else None."""
    for name, values in POLICIES.items():
        if all(_same(config_value(config, path), v) for path, v in values.items()):
            return name
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, float) and isinstance(a, int | float):
        return math.isclose(float(a), b)
    return bool(a == b)


# --- prefix reuse --------------------------------------------------------------------------------------------


def eta_of(workload: Workload, reuse_scale: float = 1.0) -> float:
    """Prefix-reuse ratio of ``workload`` after :meth:`Workload.with_reuse_scale` (token-weighted, see module)."""
    w = workload.with_reuse_scale(reuse_scale)
    reused = np.minimum(w.reused_tokens, w.input_tokens)
    return float(reused.sum() / w.input_tokens.sum())


def reuse_scale_for(workload: Workload, eta: float) -> float:
    """``workload.reuse_scale`` that sets the trace's eta to ``eta`` (fails if ``eta`` exceeds the trace's own)."""
    natural = eta_of(workload)
    if not 0 <= eta <= natural + 1e-12:
        raise ValueError(
            f"eta = {eta} is invalid: in [0, {natural:.4f}] (the trace's own reuse ratio; the "
            f"transform only removes reuse)"
        )
    return min(1.0, eta / natural)


def tool_s_per_program(workload: Workload, config: dict[str, Any]) -> float:
    """Mean tool time per program (seconds) the cell's tool mode gives the first ``workload.max_programs``
    programs: exact for replay / scale / fixed, the model's expectation for generative. JCT minus this is the
    part of JCT the serving system decides (queueing, prefill, decode), the same for every policy of a cell."""
    n = config_value(config, "workload.max_programs") or workload.n_programs
    w = workload.head(int(n))
    last = np.zeros(w.n_turns, dtype=bool)
    last[w.turn_start[1:] - 1] = True
    mode = config_value(config, "tools.mode") or "replay"
    scale = config_value(config, "tools.scale")
    scale = 1.0 if scale is None else float(scale)
    if mode in ("replay", "scale"):
        total = float(np.nansum(w.tool_s[~last])) * (scale if mode == "scale" else 1.0)
    elif mode == "fixed":
        total = float((~last).sum()) * float(config_value(config, "tools.fixed_s") or 1.0)
    else:
        sampler = ToolSampler(
            config_value(config, "tools.model_path"), scale, config_value(config, "tools.class_scale")
        )
        means = {c: sampler.mean(c) for c in set(w.tool_class)}
        total = float(sum(means[c] for c, is_last in zip(w.tool_class, last, strict=True) if not is_last))
    return total / w.n_programs


# --- bimodal tool model --------------------------------------------------------------------------------------

#: the measured model's classes with a median under this are the fast mode, seconds
FAST_MEDIAN_S = 1.0


def bimodal_tool_model(measured: str | Path = MEASURED_TOOLS, *, draws: int = 200_000, seed: int = 0) -> dict[str, Any]:
    """The two-mode model (module docstring) as a tool-model dict (``agentreplay-tool-model`` version 1)."""
    spec = load_tool_model(measured)
    rng = np.random.default_rng(seed)
    groups: dict[str, list[str]] = {"fast": [], "slow": []}
    for cls, dist in sorted(spec.classes.items()):
        groups["fast" if float(dist.ppf(0.5)) < FAST_MEDIAN_S else "slow"].append(cls)
    modes: dict[str, dict[str, Any]] = {}
    for mode, classes in groups.items():
        n = sum(spec.classes[c].n for c in classes)
        xs = np.concatenate([spec.classes[c].draw(rng, max(1, round(draws * spec.classes[c].n / n))) for c in classes])
        xs = xs[xs > 0]
        logs = np.log(xs)
        mu, sigma = float(logs.mean()), float(logs.std())
        modes[mode] = {
            "family": "lognormal",
            "params": {"mu": mu, "sigma": sigma},
            "p_zero": 0.0,
            "n": n,
            "aic": None,
            "bic": None,
            "ks": None,
            "ks_p": None,
            "ad": None,
            "median_s": math.exp(mu),
            "p90_s": math.exp(mu + 1.2815515655446004 * sigma),
            "mode": mode,
            "classes": classes,
        }
    w = modes["fast"]["n"] / (modes["fast"]["n"] + modes["slow"]["n"])
    f, s = modes["fast"]["params"], modes["slow"]["params"]
    overall = {
        "family": "lognormal_mix2",
        "n": modes["fast"]["n"] + modes["slow"]["n"],
        "p_zero": 0.0,
        "params": {"w": w, "mu1": f["mu"], "sigma1": f["sigma"], "mu2": s["mu"], "sigma2": s["sigma"]},
        "aic": None,
        "bic": None,
        "ks": None,
        "ks_p": None,
        "ad": None,
        "median_s": None,
        "p90_s": None,
    }
    by_class = {c: modes[mode] for mode, cs in groups.items() for c in cs}
    return {
        "format": FORMAT,
        "version": VERSION,
        "default_source": "study:bimodal",
        "provenance": {
            "derived_from": str(Path(measured).name),
            "method": "agentreplay.study.spec.bimodal_tool_model",
            "fast_median_below_s": FAST_MEDIAN_S,
            "draws": draws,
            "seed": seed,
            "modes": {m: modes[m]["classes"] for m in modes},
        },
        "classes": by_class,
        "overall": overall,
    }


def write_bimodal(path: str | Path, measured: str | Path = MEASURED_TOOLS) -> Path:
    return write_tool_model(path, bimodal_tool_model(measured))


@dataclass(frozen=True, slots=True)
class StudyOptions:
    """How big the study is. ``quick``: fewer programs and one seed (a fast look; the figures are noisier)."""

    seeds: tuple[int, ...] = (1, 2, 3)
    programs: int = 200  #: programs per cell (the first N of the trace)
    grid_programs: int = 100  #: programs per cell of the 80-cell grid
    trace: Path = TRACE

    @classmethod
    def make(cls, quick: bool = False, seeds: int | None = None, trace: str | Path | None = None) -> StudyOptions:
        n_seeds = seeds if seeds is not None else (1 if quick else 3)
        if n_seeds < 1:
            raise ValueError(f"--seeds {n_seeds} is invalid: >= 1")
        return cls(
            tuple(range(1, n_seeds + 1)),
            60 if quick else 200,
            40 if quick else 100,
            Path(trace).resolve() if trace else TRACE,
        )
