"""Provider cost with prompt-cache pricing: per-turn billing, per-program totals and the TTL break-even, against
hand-computed values (agentreplay.fleet.cost)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentreplay.fleet.cost import (
    Prices,
    PricesError,
    bill_turns,
    break_even,
    cost_vs_share,
    load_prices,
    prices_toml,
    program_costs,
    turn_cache_view,
)
from tests.fleet.helpers import turns_frame

ROOT = Path(__file__).resolve().parents[2]
#: Round prices (USD per million tokens) so that USD x 1e6 = tokens x price.
P = Prices(
    name="t",
    input_per_mtok=1.0,
    output_per_mtok=10.0,
    cache_write_5m_per_mtok=2.0,
    cache_write_1h_per_mtok=3.0,
    cache_read_per_mtok=0.5,
    min_cacheable_tokens=100,
)

# A: prompt 1000 -> 1500 after 99 s of cache age -> 2000 after 400 s (past 5 min, within 1 h).
# B: a 50-token prompt (below the cacheable minimum), then 3000 tokens: nothing to read.
TURNS = turns_frame(
    [
        {
            "program_id": "A",
            "turn_idx": 0,
            "input_tokens": 1000,
            "output_tokens": 10,
            "release_s": 0.0,
            "first_token_s": 1.0,
        },
        {
            "program_id": "A",
            "turn_idx": 1,
            "input_tokens": 1500,
            "output_tokens": 20,
            "release_s": 100.0,
            "first_token_s": 101.0,
        },
        {
            "program_id": "A",
            "turn_idx": 2,
            "input_tokens": 2000,
            "output_tokens": 30,
            "release_s": 501.0,
            "first_token_s": 502.0,
        },
        {
            "program_id": "B",
            "turn_idx": 0,
            "input_tokens": 50,
            "output_tokens": 5,
            "release_s": 0.0,
            "first_token_s": 2.0,
        },
        {
            "program_id": "B",
            "turn_idx": 1,
            "input_tokens": 3000,
            "output_tokens": 5,
            "release_s": 10.0,
            "first_token_s": 11.0,
        },
    ]
)


def test_view_reads_previous_prompt_and_ages_from_its_first_token() -> None:
    v = turn_cache_view(TURNS)
    assert v["readable_tokens"].tolist() == [0, 1000, 1500, 0, 50]
    assert np.isnan(v["cache_age_s"].iloc[0]) and np.isnan(v["cache_age_s"].iloc[3])
    assert v["cache_age_s"].iloc[[1, 2, 4]].tolist() == [99.0, 400.0, 8.0]


def test_turn_bill_per_tier_by_hand() -> None:
    b = bill_turns(turn_cache_view(TURNS), P)
    assert b["5m_read"].tolist() == [0, 1000, 0, 0, 0]  # A's third turn: 400 s > 300 s, entry expired
    assert b["5m_write"].tolist() == [1000, 500, 2000, 0, 3000]
    assert b["5m_fresh"].tolist() == [0, 0, 0, 50, 0]
    assert b["1h_read"].tolist() == [0, 1000, 1500, 0, 0]
    assert b["1h_write"].tolist() == [1000, 500, 500, 0, 3000]
    assert (b["5m_usd"] * 1e6).round(6).tolist() == [2100, 1700, 4300, 100, 6050]
    assert (b["1h_usd"] * 1e6).round(6).tolist() == [3100, 2200, 2550, 100, 9050]
    assert (b["nocache_usd"] * 1e6).round(6).tolist() == [1100, 1700, 2300, 100, 3050]


def test_program_costs_and_cheaper_tier() -> None:
    pc = program_costs(bill_turns(turn_cache_view(TURNS), P)).set_index("program_id")
    assert (pc["cost_5m_usd"] * 1e6).round(6).to_dict() == {"A": 8100, "B": 6150}
    assert (pc["cost_1h_usd"] * 1e6).round(6).to_dict() == {"A": 7850, "B": 9150}
    assert pc["cheaper_tier"].to_dict() == {"A": "1h", "B": "5m"}
    assert pc["gaps_expired_5m"].to_dict() == {"A": 1, "B": 0}
    assert pc["gaps_expired_1h"].to_dict() == {"A": 0, "B": 0}


def test_break_even_by_hand() -> None:
    be = break_even(turn_cache_view(TURNS), P)
    # W = 1000 + 500 + 500 + 3000; R = 1000 + 1500; R>5m = 1500; R>1h = 0
    assert (be["written_tokens_W"], be["readable_tokens_R"]) == (5000, 2500)
    assert (be["readable_over_5m_tokens"], be["readable_over_1h_tokens"]) == (1500, 0)
    assert (be["gaps"], be["gaps_over_5m"], be["gaps_over_1h"]) == (2, 1, 0)
    assert be["share_over_5m_tokens_s"] == pytest.approx(0.6)
    assert be["share_over_5m_count"] == pytest.approx(0.5)
    assert be["break_even_share_s_star"] == pytest.approx((3 - 2) * 5000 / ((2 - 0.5) * 2500))  # 1.333
    assert be["cheaper_tier"] == "5m"


def test_cost_lines_cross_at_break_even_and_match_the_bill_at_the_observed_share() -> None:
    view = turn_cache_view(TURNS)
    be = break_even(view, P)
    rest = (70 * 10 + 50 * 1) / 1e6  # outputs and the uncacheable prompt
    s = np.array([be["share_over_5m_tokens_s"], be["break_even_share_s_star"]])
    lines = cost_vs_share(be, P, 2, rest, s)
    assert lines["usd_per_1000_5m"].iloc[0] == pytest.approx((8100 + 6150) / 1e6 * 500)
    assert lines["usd_per_1000_1h"].iloc[0] == pytest.approx((7850 + 9150) / 1e6 * 500)
    assert lines["usd_per_1000_5m"].iloc[1] == pytest.approx(lines["usd_per_1000_1h"].iloc[1])


def test_trace_reuse_limits_the_readable_prefix() -> None:
    v = turn_cache_view(TURNS, reused_tokens=np.array([0, 400, 1500, 0, 0]))
    assert v["readable_tokens"].tolist() == [0, 400, 1500, 0, 0]


def test_prices_file_round_trip_and_errors(tmp_path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(prices_toml(P))
    assert load_prices(f) == P
    f.write_text("[prices]\ncache_read_per_mtok = -1\n")
    with pytest.raises(PricesError, match=r"p.toml: \[prices\] cache_read_per_mtok = -1"):
        load_prices(f)
    f.write_text("[prices]\ninput_price = 3\n")
    with pytest.raises(PricesError, match=r"unknown field.*input_price"):
        load_prices(f)
    f.write_text("[other]\n")
    with pytest.raises(PricesError, match="no \\[prices\\] table"):
        load_prices(f)


def test_committed_example_prices_equal_the_defaults() -> None:
    assert load_prices(ROOT / "reports" / "tasks" / "prices.toml") == Prices()
