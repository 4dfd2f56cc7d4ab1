"""The plan's search: the instance-count search on a monotone oracle, and end to end on a slice of the bundled
trace (the chosen configuration is the cheapest feasible one tried; bisection is exact; reruns reuse cells)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from agentreplay.plan import PlanError, PlanRequest, parse_slo, plan
from agentreplay.plan.cell import PlanExecutor, run_plan_cell
from agentreplay.plan.rank import choose
from agentreplay.plan.search import Family, FamilyState, bound_cost, monotonicity, next_probe, pick
from agentreplay.plan.slo import Term
from agentreplay.sweep import worker
from tests.plan.conftest import InlineExecutor

LOAD = 0.5
PROGRAMS = 30


def _search(
    thresholds: dict[Family, int], runners_up: int, max_instances: int = 32
) -> tuple[list[FamilyState], list[tuple[Family, int]]]:
    """Drive next_probe / pick as plan() does, with an oracle: family f meets the objective from thresholds[f]
    instances on."""
    states = [FamilyState(f) for f in thresholds]
    probes: list[tuple[Family, int]] = []
    while True:
        bound = bound_cost(states, runners_up)
        pending = [(st, n) for st in states if (n := next_probe(st, bound, max_instances)) is not None]
        if not pending:
            return states, probes
        for st, n in pick(pending, workers=1):
            probes.append((st.family, n))
            if n >= thresholds[st.family]:
                st.hi = n
            else:
                st.lo = n


def test_search_finds_each_familys_threshold_exactly() -> None:
    fams = {Family("g", "m", 1, f"p{k}"): k for k in (1, 2, 3, 7, 13, 32)}
    states, probes = _search(fams, runners_up=10)
    for st in states:
        assert st.hi == fams[st.family] and st.lo == fams[st.family] - 1 and st.end == "converged"
    per_family = {f: sum(1 for g, _ in probes if g == f) for f in fams}
    assert per_family[Family("g", "m", 1, "p1")] == 1
    assert max(per_family.values()) <= 12  # growing steps then bisection, not a linear scan of 32


def test_a_family_that_never_meets_stops_at_max_instances() -> None:
    states, probes = _search({Family("g", "m", 1, "p"): 99}, runners_up=0, max_instances=10)
    assert states[0].hi is None and states[0].lo == 10 and states[0].end == "max-instances"
    assert [n for _, n in probes][-1] == 10


def test_families_that_cannot_place_are_pruned() -> None:
    cheap, dear = Family("g", "m", 1, "cheap"), Family("g", "m", 4, "dear")
    states, probes = _search({cheap: 2, dear: 3}, runners_up=0)
    assert {s.family: s.hi for s in states}[cheap] == 2
    assert all(n * f.tp <= 4 or f == cheap for f, n in probes)  # dear never tried above the cheap family's cost
    assert {s.family: s.end for s in states}[dear] == "pruned"


def test_plan_executor_adds_goodput_and_runs_the_plan_cell(bundled: Path) -> None:
    from agentreplay.sim.config import SimConfig

    cfg = SimConfig().replace(workload={"arrival": "poisson", "rate_per_s": LOAD, "max_programs": 10}).to_dict()
    inner = InlineExecutor()
    ex = PlanExecutor(inner, [1e9, 1e-3])
    res = ex.submit(worker.run_cell, str(bundled), cfg).result()
    assert res["status"] == "ok"
    assert res["figures"]["goodput_1e+09s"] == 1.0 and res["figures"]["goodput_0_001s"] == 0.0
    assert [k for k in res["figures"] if k.startswith(("error_bands", "findings"))] == []  # (worker.NOT_FIGURES)
    plain = worker.run_cell(str(bundled), cfg)
    assert {k: v for k, v in res["figures"].items() if not k.startswith("goodput")} == plain["figures"]
    p90 = res["figures"]["jct_p90_s"]
    mid = run_plan_cell(str(bundled), cfg, (p90,))["figures"]
    assert 0.85 <= mid[f"goodput_{p90:g}s".replace(".", "_")] <= 0.95  # about 90% finish within the p90


def _p90(bundled: Path, gpu: str, n: int) -> float:
    from agentreplay.sim.config import SimConfig

    cfg = SimConfig().replace(
        hardware={"gpu": gpu, "model": "llama-3.1-8b", "instances": n},
        workload={"arrival": "poisson", "rate_per_s": LOAD, "max_programs": PROGRAMS},
    )
    return float(worker.run_cell(str(bundled), cfg.to_dict())["figures"]["jct_p90_s"])


def _request(bundled: Path, slo: tuple[Term, ...], **kw: Any) -> PlanRequest:
    return PlanRequest(bundled, LOAD, slo, max_programs=PROGRAMS, **kw)


def test_chosen_is_the_cheapest_feasible_configuration_tried(
    bundled: Path, tmp_path: Path, inline: InlineExecutor
) -> None:
    # objective between the A100's 2- and 3-instance JCT p90, so the A100 needs more than one instance
    v2, v3 = _p90(bundled, "a100-80gb", 2), _p90(bundled, "a100-80gb", 3)
    assert v3 < v2
    slo = (Term("jct_p90", "<=", (v2 + v3) / 2),)
    req = _request(bundled, slo, gpus=("a100-80gb", "h100-sxm"), tps=(1, 2), presets=("vllm", "sglang"), runners_up=2)
    res = plan(req, inline, tmp_path / "p")
    feasible = [t for t in res.trials if t.feasible]
    assert res.chosen is not None and res.chosen.feasible
    assert res.chosen.cost == min(t.cost for t in feasible)
    assert res.choice is not None and res.choice.chosen is res.chosen
    assert choose(list(reversed(feasible)), slo).chosen is res.chosen  # the order tried never decides
    assert res.chosen.cost == pytest.approx(res.chosen.gpus * 1000 / (LOAD * 3600))
    assert all(t.feasible == slo[0].met(t.figures["jct_p90_s"]) for t in res.trials)
    # bisection is exact: each family's smallest feasible n has its n - 1 tried and missing
    tried = {(t.family, t.instances): t for t in res.trials}
    for st in res.states:
        if st.hi is not None and st.hi > 1 and st.end == "converged":
            assert not tried[(st.family, st.hi - 1)].feasible
    a100 = next(s for s in res.states if s.family == Family("a100-80gb", "llama-3.1-8b", 1, "vllm"))
    assert a100.hi is None or a100.hi >= 2
    assert len(res.runners_up) <= 2 and all(t.family != res.chosen.family for t in res.runners_up)
    assert [t.cost for t in res.runners_up] == sorted(t.cost for t in res.runners_up)
    assert res.rounds >= 1 and inline.calls == len({t.cell_id for t in res.trials})
    # the same plan into the same folder reuses every cell and chooses the same
    again = plan(req, InlineExecutor(), tmp_path / "p")
    assert all(t.reused for t in again.trials) and again.chosen is not None
    assert (again.chosen.family, again.chosen.instances) == (res.chosen.family, res.chosen.instances)


def test_nothing_feasible_means_no_choice(bundled: Path, tmp_path: Path, inline: InlineExecutor) -> None:
    res = plan(_request(bundled, parse_slo("jct_p90<=1"), max_instances=3), inline, tmp_path / "p")
    assert res.chosen is None and res.runners_up == []
    assert [t.instances for t in res.trials] == [1, 2, 3] and res.states[0].end == "max-instances"


def test_a_tp_that_does_not_divide_the_model_is_reported_not_dropped(
    bundled: Path, tmp_path: Path, inline: InlineExecutor
) -> None:
    res = plan(_request(bundled, parse_slo("jct_p90<=100000"), tps=(1, 3), max_instances=2), inline, tmp_path / "p")
    bad = next(s for s in res.states if s.family.tp == 3)
    assert bad.end == "error" and bad.error is not None and "skipped" in bad.error
    assert res.chosen is not None and res.chosen.family.tp == 1 and res.chosen.instances == 1


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"gpus": ("h100-nope",)}, "--gpus 'h100-nope'"),
        ({"models": ("gpt-9",)}, "--models 'gpt-9'"),
        ({"presets": ("fastest",)}, "--presets 'fastest'"),
    ],
)
def test_unknown_names_fail_naming_the_option(
    bundled: Path, tmp_path: Path, inline: InlineExecutor, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(PlanError, match=None) as exc:
        plan(_request(bundled, parse_slo("jct_p90<=600"), **kw), inline, tmp_path / "p")
    assert message in str(exc.value)


def test_bad_load_fails(bundled: Path, tmp_path: Path, inline: InlineExecutor) -> None:
    with pytest.raises(PlanError, match="--load"):
        plan(PlanRequest(bundled, 0.0, parse_slo("jct_p90<=600")), inline, tmp_path / "p")


def test_monotonicity_check_flags_a_larger_n_that_does_worse() -> None:
    from agentreplay.plan.search import Trial

    fam = Family("g", "m", 1, "p")
    slo = parse_slo("jct_p90<=100")

    def trial(n: int, p90: float) -> Trial:
        t = Trial(fam, n, 1, f"c{n}", "ok", None, 0.1, False, {"jct_p90_s": p90}, float(n))
        t.feasible = slo[0].met(p90)
        return t

    assert monotonicity([trial(1, 200), trial(2, 90), trial(3, 80)], slo) == []
    flagged = monotonicity([trial(1, 200), trial(2, 90), trial(3, 150)], slo)
    assert any("n=2 meets the objective but n=3 does not" in v for v in flagged)
    assert any("jct_p90 90 at n=2 -> 150 at n=3" in v for v in flagged)
    assert monotonicity([trial(2, 90), trial(3, 90.5)], slo) == []  # within the 1% tolerance
    good = parse_slo("goodput@600>=0.9")
    g0 = Trial(fam, 1, 1, "g1", "ok", None, 0.1, False, {"goodput_600s": 0.0}, 1.0)
    g1 = Trial(fam, 2, 1, "g2", "ok", None, 0.1, False, {"goodput_600s": 0.5}, 2.0)
    assert monotonicity([g0, g1], good) == []  # a goodput of 0 is a valid starting point
    assert monotonicity([g1, g0], good) == []  # (sorted by n: g0 is n=1)
    assert not math.isnan(trial(2, 1).cost)


def test_a_family_whose_cells_fail_is_reported_with_the_error(
    bundled: Path, tmp_path: Path, inline: InlineExecutor
) -> None:
    req = PlanRequest(
        bundled,
        LOAD,
        parse_slo("jct_p90<=100000"),
        gpus=("rtx3090", "h100-sxm"),
        models=("llama-3.1-70b",),
        max_programs=4,
        max_instances=2,
        runners_up=0,
    )
    res = plan(req, inline, tmp_path / "p")
    bad = next(s for s in res.states if s.family.gpu == "rtx3090")
    assert bad.end == "error" and bad.error
    failed = [t for t in res.trials if t.family.gpu == "rtx3090"]
    assert len(failed) == 1 and failed[0].status == "failed" and failed[0].why.startswith("failed: ")
    assert res.chosen is None or res.chosen.family.gpu == "h100-sxm"


def test_several_seeds_judge_on_the_worst(bundled: Path, tmp_path: Path, inline: InlineExecutor) -> None:
    from agentreplay.sim.config import SimConfig

    def p90(seed: int) -> float:
        cfg = SimConfig().replace(
            hardware={"gpu": "h100-sxm", "model": "llama-3.1-8b", "instances": 1},
            workload={"arrival": "poisson", "rate_per_s": LOAD, "max_programs": PROGRAMS},
            seed=seed,
        )
        return float(worker.run_cell(str(bundled), cfg.to_dict())["figures"]["jct_p90_s"])

    v0, v1 = p90(0), p90(1)
    assert v0 != v1  # the seeds draw different arrivals
    lo, hi = sorted((v0, v1))
    req = _request(bundled, (Term("jct_p90", "<=", (lo + hi) / 2),), max_instances=1, seeds=(0, 1))
    res = plan(req, inline, tmp_path / "p")
    (t,) = res.trials
    assert t.per_seed["jct_p90"] == [v0, v1] and t.value(req.slo[0]) == hi
    assert not t.feasible and res.chosen is None  # meets under one seed only
    assert inline.calls == 2 and "+" in t.cell_id
    ok = plan(
        _request(bundled, (Term("jct_p90", "<=", hi),), max_instances=1, seeds=(0, 1)), InlineExecutor(), tmp_path / "p"
    )
    assert ok.chosen is not None and ok.trials[0].reused


def test_a_new_goodput_deadline_reruns_the_reused_cells(bundled: Path, tmp_path: Path) -> None:
    first = plan(_request(bundled, parse_slo("goodput@100000>=0.5"), max_instances=1), InlineExecutor(), tmp_path)
    assert first.trials[0].value(first.request.slo[0]) == 1.0
    again = plan(_request(bundled, parse_slo("goodput@100000>=0.5"), max_instances=1), InlineExecutor(), tmp_path)
    assert again.trials[0].reused
    other = plan(_request(bundled, parse_slo("goodput@1>=0.5"), max_instances=1), InlineExecutor(), tmp_path)
    assert not other.trials[0].reused and other.trials[0].value(other.request.slo[0]) == 0.0
