"""Evidence at the decision and why configurations fail: every headlined figure names
the validated cells its band comes from, or the nearest ones and how they err; a margin under the band is
marginal; failures are grouped with the option that would make them run."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from agentreplay.bands import closest
from agentreplay.plan.evidence import margin, term_evidence
from agentreplay.plan.explain import explain, kind_of, lines
from agentreplay.plan.search import FamilyState
from agentreplay.plan.slo import parse_slo
from agentreplay.plan.trial import Family, Trial

RES = [  # two workstation / dense-small cells (one profiled), one CPU cell
    {"cell_id": "a", "source": "vllm-run", "gpu": "rtx4090", "model": "llama-3.1-8b", "gpu_class": "workstation",
     "model_class": "dense-small", "family": "e2e", "error_pct": 4.0, "regime": "profiled"},
    {"cell_id": "b", "source": "llmperf", "gpu": "rtx3090", "model": "llama-3.1-8b", "gpu_class": "workstation",
     "model_class": "dense-small", "family": "e2e", "error_pct": 60.0},
    {"cell_id": "c", "source": "live-vllm-cpu", "gpu": "cpu", "model": "tiny-llama", "gpu_class": "cpu",
     "model_class": "other", "family": "jct", "error_pct": -10.0},
]  # fmt: skip
SLO = parse_slo("jct_p90<=900,goodput@900>=0.9")


def _trial(gpu: str, model: str, p90: float, seeds: list[float] | None = None) -> Trial:
    return Trial(
        Family(gpu, model, 1, "vllm"),
        1,
        1,
        "c",
        "ok",
        None,
        0.1,
        False,
        {"jct_p90_s": p90, "goodput_900s": 0.95},
        1.0,
        feasible=True,
        per_seed={"jct_p90": seeds or [p90]},
    )


def test_a_comparable_band_names_its_cells() -> None:
    ev = term_evidence(SLO[0], _trial("rtx4090", "llama-3.1-8b", 500.0), RES, "unprofiled")
    assert ev["comparable"] and ev["band_pct"] == 60.0  # only b: a is of the other (profiled) regime
    assert "llmperf rtx3090 llama-3.1-8b (1)" in ev["text"] and "vllm-run" not in ev["text"]
    prof = term_evidence(SLO[0], _trial("rtx4090", "llama-3.1-8b", 500.0), RES, "profiled")
    assert prof["band_pct"] == 32.0 and "vllm-run rtx4090 llama-3.1-8b (1)" in prof["text"]
    assert "does not record their pricing regime" in prof["text"]  # b has no regime field
    assert prof["short"] == "+-32% (2 cells)"


def test_without_a_comparable_cell_the_nearest_are_named_with_sign_and_size() -> None:
    ev = term_evidence(SLO[0], _trial("h100-sxm", "llama-3.1-70b", 600.0), RES, "unprofiled")
    assert not ev["comparable"] and ev["level"] == "all cells"
    assert ev["text"].startswith("no validated cell is comparable (datacenter GPU, dense-large model, unprofiled)")
    assert "simulator high by 18% on average (|error| 25%)" in ev["text"]
    assert "llmperf rtx3090 llama-3.1-8b (1)" in ev["text"] and ev["short"] == "none (nearest: +18%, 3 cells)"
    good = term_evidence(SLO[1], _trial("h100-sxm", "llama-3.1-70b", 600.0), RES, "unprofiled")
    assert good["band_pct"] is None and good["text"].startswith("goodput is not a validated figure")
    assert term_evidence(SLO[0], _trial("h100-sxm", "llama-3.1-70b", 1.0), [], "unprofiled")["short"] == "no residuals"
    assert closest(RES, "throughput", "h100-sxm", "llama-3.1-70b") is None


def test_margin_spread_and_marginal() -> None:
    t = _trial("h100-sxm", "llama-3.1-70b", 612.0, [598.0, 605.0, 612.0])
    ev = term_evidence(SLO[0], t, RES, "unprofiled")  # |error| 25%: 612 x 1.25 = 765 < 900
    m = margin(SLO[0], t, ev)
    assert m["margin_pct"] == pytest.approx(32.0) and m["spread"] == 14.0 and m["marginal"] is False
    assert m["text"].startswith("jct_p90 612.0 s vs <= 900 s: 32% margin; over 3 seeds 598.0-612.0 s (spread 14.0 s")
    close = _trial("h100-sxm", "llama-3.1-70b", 800.0)  # 800 x 1.25 = 1000 > 900: marginal
    m = margin(SLO[0], close, term_evidence(SLO[0], close, RES, "unprofiled"))
    assert m["marginal"] is True and "MARGINAL" in m["text"] and "nearest (not comparable)" in m["text"]
    assert margin(SLO[1], close, term_evidence(SLO[1], close, RES, "unprofiled"))["marginal"] is None


WEIGHTS = (
    "CapacityError: llama-3.1-70b (bf16, tp=1) on h100-sxm: weights 131.42 GiB/rank + reserve 1.15 GiB exceed the "
    "budget 71.26 GiB (79.18 GiB x 0.9) (at run.py:213)"
)
KV = (
    "CapacityError: llama-3.1-70b on 2x h100-sxm: 1802 KV blocks of 16 tokens (28,832 tokens, from the memory model) "
    "leave no room for the longest request of the trace (106,539 tokens = 6659 blocks); set --max-model-len (vLLM "
    "rejects longer requests and runs the rest) to at most 28,832 (at run.py:232)"
)


def _failed(tp: int, preset: str, error: str) -> Trial:
    return Trial(Family("h100-sxm", "llama-3.1-70b", tp, preset), 1, 1, "x", "failed", error, 0.0, False, {}, 1.0)


def test_failures_are_grouped_with_the_option_that_fixes_them() -> None:
    assert kind_of(WEIGHTS) == "weights" and kind_of(KV) == "kv" and kind_of("boom") == "failed"
    # three programs; the second has a 50,000-token prompt, the third's first turn is the longest request
    wl = SimpleNamespace(
        input_tokens=np.array([1000, 50_000, 100_000, 2000]),
        output_tokens=np.array([10, 10, 6539, 10]),
        turn_start=np.array([0, 1, 2, 4]),
        n_programs=3,
    )
    missed = _trial("h100-sxm", "llama-3.1-70b", 1152.0)
    missed.family = Family("h100-sxm", "llama-3.1-70b", 4, "vllm")
    missed.feasible = False
    missed.instances = 2
    trials = [_failed(1, "vllm", WEIGHTS), _failed(1, "sglang", WEIGHTS), _failed(2, "vllm", KV), missed]
    st = FamilyState(missed.family, lo=2, hi=3)
    groups = explain(trials, SLO[:1], [st], {}, lambda: wl)
    assert list(groups) == ["weights", "kv", "objective"]
    (w,) = groups["weights"]
    assert w["configurations"] == "h100-sxm llama-3.1-70b tp1 (sglang, vllm)"
    assert w["fix"].startswith("feasible with --tp 4") and "--tp 2 --max-model-len 28,832" in w["fix"]
    assert "cuts 2 of 3 programs" in w["fix"]  # the 50,000- and 100,000-token prompts are over 28,832
    (k,) = groups["kv"]
    assert "set --max-model-len" not in k["reason"] and k["fix"].startswith("feasible with --tp 4")
    (o,) = groups["objective"]
    assert o["reason"] == "jct_p90 1,152 s > 900 s (by 28%)" and o["fix"] == "3x meets it"
    text = "\n".join(lines(groups))
    assert "weights do not fit in GPU memory (1):" in text and "ran, and missed the objective (1):" in text
