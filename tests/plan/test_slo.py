"""The objective grammar: what parses, to what, and the errors for what does not."""

from __future__ import annotations

import math

import pytest

from agentreplay.plan.slo import LATENCY_METRICS, SloError, Term, parse_slo


def test_terms_parse_to_metric_op_bound_and_column() -> None:
    terms = parse_slo(" jct_p90 <= 600, ttft_p99<=5s ,goodput@900s>=0.95")
    assert terms == (Term("jct_p90", "<=", 600.0), Term("ttft_p99", "<=", 5.0), Term("goodput@900", ">=", 0.95, 900.0))
    assert [t.column for t in terms] == ["jct_p90_s", "ttft_p99_s", "goodput_900s"]
    assert [t.band_metric for t in terms] == ["jct_s", "ttft_s", None]
    assert parse_slo("goodput@1.5>=1")[0].column == "goodput_1_5s"
    assert parse_slo("JCT_MEAN<=1e3")[0] == Term("jct_mean", "<=", 1000.0)
    assert len(LATENCY_METRICS) == 16 and all(parse_slo(f"{m}<=1") for m in LATENCY_METRICS)


def test_met_and_slack() -> None:
    lat, good = parse_slo("jct_p90<=600,goodput@600>=0.9")
    assert lat.met(600.0) and not lat.met(600.1) and not lat.met(None) and not lat.met(math.nan)
    assert good.met(0.9) and not good.met(0.89)
    assert lat.slack(300.0) == pytest.approx(0.5) and good.slack(0.99) == pytest.approx(0.1)
    assert lat.slack(None) == -math.inf


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty objective"),
        ("   ", "empty objective"),
        ("jct_p90<=600,", "term 2 is empty"),
        ("jct_p90", "expected METRIC<=VALUE"),
        ("jct_p90<600", "operator '<' is not supported"),
        ("jct_p90=600", "operator '=' is not supported"),
        ("jct_p95<=600", "unknown metric 'jct_p95'"),
        ("latency<=600", "unknown metric 'latency'"),
        ("jct_p90>=600", "a latency must be bounded from above"),
        ("jct_p90<=ten", "'ten' is not a number"),
        ("jct_p90<=0", "must be > 0 seconds"),
        ("jct_p90<=-5", "must be > 0 seconds"),
        ("jct_p90<=inf", "not a number"),
        ("goodput>=0.9", "goodput needs its deadline"),
        ("goodput@abc>=0.9", "goodput needs its deadline"),
        ("goodput@0>=0.9", "must be > 0"),
        ("goodput@600<=0.9", "goodput must be bounded from below"),
        ("goodput@600>=1.5", "fraction in (0, 1]"),
        ("goodput@600>=90%", "not a number"),
        ("jct_p90<=600,jct_p90<=700", "given twice"),
    ],
)
def test_bad_objectives_fail_naming_the_term(text: str, message: str) -> None:
    with pytest.raises(SloError, match=None) as exc:
        parse_slo(text)
    assert message in str(exc.value)
    if text.strip():
        assert repr(text) in str(exc.value)  # the whole objective is quoted, so the user sees where
