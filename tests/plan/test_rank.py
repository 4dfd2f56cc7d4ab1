"""The plan's choice is robust to noise and prices what a configuration deploys:
equally cheap configurations whose objective differs by less than the seed spread are a tie, broken by the
simplest deployment, never by which number came out a few hundredths lower."""

from __future__ import annotations

import itertools

import pytest

from agentreplay.fleet.cost import Prices, PricesError, load_prices, prices_toml
from agentreplay.plan.rank import Footprint, choose, cost, missing_prices, simplicity
from agentreplay.plan.slo import parse_slo
from agentreplay.plan.trial import Family, Trial

SLO = parse_slo("jct_p90<=900")
LOAD = 0.05
PLAIN = Footprint()
AFFINITY = Footprint(mechanisms=("router.policy=session-affinity", "policy.retention=ttl"))
OFFLOAD = Footprint(dram_gib=256.0, mechanisms=("policy.retention=offload",))


def trial(preset: str, fp: Footprint, seeds: list[float], prices: Prices | None = None, tp: int = 8) -> Trial:
    """One instance of h100-sxm at TP ``tp`` whose jct_p90 per seed is ``seeds`` (judged on the worst)."""
    t = Trial(
        Family("h100-sxm", "llama-3.1-70b", tp, preset),
        1,
        1,
        preset,
        "ok",
        None,
        0.1,
        False,
        {"jct_p90_s": max(seeds)},
        tp * 1000 / (LOAD * 3600),
        feasible=True,
        per_seed={"jct_p90": list(seeds)},
        footprint=fp,
    )
    t.priced = cost("h100-sxm", tp, 1, fp, LOAD, prices)
    return t


# the case: every preset within a few tenths of a second of 608.6 s, the seeds spread ~10 s
NOISY = {"vllm": 608.64, "agent-affinity": 608.62, "lmcache-offload": 608.60}


@pytest.mark.parametrize("order", list(itertools.permutations(NOISY)))
@pytest.mark.parametrize("jitter", [-0.3, 0.0, 0.3])
def test_noise_never_decides_the_preset(order: tuple[str, ...], jitter: float) -> None:
    fps = {"vllm": PLAIN, "agent-affinity": AFFINITY, "lmcache-offload": OFFLOAD}
    trials = [trial(p, fps[p], [598.0, 603.0, NOISY[p] + (jitter if p == "vllm" else 0.0)]) for p in order]
    choice = choose(trials, SLO)
    assert choice is not None
    assert choice.chosen.family.preset == "vllm"  # the simplest of the cheapest, whichever is lowest by noise
    assert [t.family.preset for t in choice.tied] == ["agent-affinity"]  # the DRAM tier costs more: not tied
    assert "tie broken by the simpler deployment" in choice.rule


def test_with_one_seed_differences_under_one_percent_are_still_ties() -> None:
    a = trial("agent-affinity", AFFINITY, [600.0])
    v = trial("vllm", PLAIN, [604.0])  # 0.7% worse
    choice = choose([a, v], SLO)
    assert choice is not None and choice.chosen is v and choice.tied == [a]


def test_a_difference_beyond_the_spread_decides() -> None:
    v = trial("vllm", PLAIN, [700.0, 705.0, 710.0])
    a = trial("agent-affinity", AFFINITY, [600.0, 605.0, 610.0])  # 100 s better, spread 10 s
    choice = choose([v, a], SLO)
    assert choice is not None and choice.chosen is a and choice.tied == [] and choice.beaten == [v]
    assert "beyond the seed spread" in choice.rule


def test_cheaper_wins_whatever_the_objective() -> None:
    small = trial("agent-affinity", AFFINITY, [880.0, 890.0], tp=4)
    big = trial("vllm", PLAIN, [300.0, 310.0], tp=8)
    choice = choose([big, small], SLO)
    assert choice is not None and choice.chosen is small and "the only configuration" in choice.rule


def test_simplicity_counts_tiers_then_mechanisms() -> None:
    assert simplicity(trial("vllm", PLAIN, [1.0])) < simplicity(trial("a", AFFINITY, [1.0]))
    assert simplicity(trial("a", AFFINITY, [1.0])) < simplicity(trial("o", OFFLOAD, [1.0]))
    assert Footprint.of({"router.policy": "least-loaded", "policy.retention": "lru", "tiers.dram_gib": 0.0}) == PLAIN
    assert Footprint.of({"admission.policy": "thunderagent"}).mechanisms == ("admission.policy=thunderagent",)


def test_cost_without_prices_lists_the_extra_tiers() -> None:
    c = cost("h100-sxm", 8, 1, OFFLOAD, LOAD)
    hours = 1000 / (LOAD * 3600)
    assert c.usd is None and c.gpu_hours == pytest.approx(8 * hours) and c.dram_gib_hours == pytest.approx(256 * hours)
    assert c.text() == f"{8 * hours:.3g} GPU-h + {256 * hours:,.0f} GiB-h DRAM"
    assert c.hourly_text() == "8 GPU-h + 256 GiB-h DRAM"
    assert cost("h100-sxm", 8, 1, PLAIN, LOAD).text() == f"{8 * hours:.3g} GPU-h"
    assert cost("h100-sxm", 8, 1, PLAIN, LOAD).key < c.key  # the DRAM tier ranks after at equal GPU-hours


def test_cost_with_prices_is_in_usd_and_prices_the_tiers() -> None:
    p = Prices(gpu_per_hour={"h100-sxm": 2.5}, dram_per_gib_hour=0.01)
    hours = 1000 / (LOAD * 3600)
    c = cost("h100-sxm", 8, 2, OFFLOAD, LOAD, p)
    assert c.usd == pytest.approx((8 * 2.5 + 2 * 256 * 0.01) * hours) and c.text().startswith("$")
    assert missing_prices(p, ["h100-sxm"], [OFFLOAD]) == []
    gaps = missing_prices(Prices(gpu_per_hour={"b200": 5.0}), ["h100-sxm"], [OFFLOAD])
    assert gaps == [
        "gpu_per_hour has no price for 'h100-sxm'",
        "no dram_per_gib_hour (a configuration adds a host DRAM tier)",
    ]
    free = Prices(gpu_per_hour={"h100-sxm": 2.5}, dram_per_gib_hour=0.0)
    v, o = trial("vllm", PLAIN, [600.0], free), trial("lmcache-offload", OFFLOAD, [590.0], free)
    choice = choose([o, v], SLO)  # same USD (free DRAM), 1.7% apart with one seed: a real difference
    assert choice is not None and choice.chosen is o
    o2 = trial("lmcache-offload", OFFLOAD, [599.0], free)  # within 1%: a tie, the tier loses it
    choice = choose([o2, v], SLO)
    assert choice is not None and choice.chosen is v and "no extra memory tier" in choice.rule


def test_prices_file_takes_gpu_and_tier_prices(tmp_path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('[prices]\ndram_per_gib_hour = 0.004\n[prices.gpu_per_hour]\nh100-sxm = 2.99\n"b200" = 5\n')
    p = load_prices(f)
    assert p.gpu_per_hour == {"h100-sxm": 2.99, "b200": 5} and p.dram_per_gib_hour == 0.004
    assert p.cxl_per_gib_hour is None and p.input_per_mtok == Prices().input_per_mtok  # token prices: defaults
    f.write_text(prices_toml(p))
    assert load_prices(f) == p
    f.write_text("[prices]\ngpu_per_hour = { h100-sxm = -1 }\n")
    with pytest.raises(PricesError, match=r"gpu_per_hour.h100-sxm = -1"):
        load_prices(f)
