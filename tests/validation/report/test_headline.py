"""The end-to-end headline: every cell and metric, misses first, stand-ins apart, by-construction metrics unjudged."""

from __future__ import annotations

import pandas as pd
import pytest

from validation.report import headline as H


def _row(
    source: str, cell: str, metric: str, measured: float, simulated: float, judged: bool = True, **kw: object
) -> dict[str, object]:
    return {
        "source": source,
        "cell_id": cell,
        "gpu": "g",
        "model": "m",
        "dtype": "bf16",
        "tp": 1,
        "metric": metric,
        "measured": measured,
        "simulated": simulated,
        "rel_error": simulated / measured - 1,
        "role": "validation",
        "note": "",
        "judged": judged,
        **kw,
    }


@pytest.fixture
def errors() -> pd.DataFrame:
    return pd.DataFrame(
        [
            _row("vllm-run", "vllm-run/a", "ttft_mean_s", 1.0, 1.05),  # +5%: met
            _row("vllm-run", "vllm-run/a", "e2e_mean_s", 2.0, 2.1),  # +5%: met
            _row("llmperf", "llmperf/b", "ttft_mean_s", 1.0, 1.5),  # +50%: missed by 40 pp
            _row("llmperf", "llmperf/b", "throughput_output_tok_s", 100.0, 70.0, judged=False),  # fixed by construction
            _row("llmperf", "llmperf/c", "e2e_mean_s", 1.0, 1.08),  # met
            _row("llmperf", "llmperf/c", "throughput_output_tok_s", 100.0, 150.0, judged=False),  # +50% but not judged
            _row("agent-jct", "agent-jct/d", "jct_mean_s", 10.0, 90.0),  # stand-in, apart
            _row("splitwise", "splitwise/e", "decode_iteration_s", 1.0, 1.2),  # |e| 20%
            _row("splitwise", "splitwise/e", "decode_iteration_s", 1.0, 1.0),  # |e| 0% -> MAPE 10%: met (boundary)
            _row("splitwise", "splitwise/e", "prefill_iteration_s", 2.0, 1.0),  # MAPE 50%: missed
            _row("vidur", "vidur/f", "layer_time_s", 1.0, 3.0, role="calibration"),  # a component: not end to end
        ]
    )


def test_every_end_to_end_metric_once_misses_first(errors: pd.DataFrame) -> None:
    t = H.e2e_table(errors)
    assert len(t) == 9  # 7 point metrics + 2 Splitwise cell metrics; the component row is not end to end
    assert t["verdict"].iloc[0] == "missed by 790.0 pp"  # the stand-in jct (+800%) is still a row of the table
    assert list(t["verdict"].str.split(" ").str[0]) == ["missed"] * 3 + ["met"] * 4 + ["not"] * 2
    sw = t[(t["cell_id"] == "splitwise/e")].set_index("metric")
    assert sw.loc["decode_iteration_s", "error_pct"] == pytest.approx(10.0)
    assert sw.loc["decode_iteration_s", "statistic"] == "MAPE over 2 points"
    assert sw.loc["prefill_iteration_s", "verdict"] == "missed by 40.0 pp"
    unjudged = t[~t["judged"]]
    assert set(unjudged["verdict"]) == {"not judged: fixed by construction"}
    assert unjudged["error_pct"].tolist() == pytest.approx([50.0, -30.0])  # shown with their errors


def test_cell_verdicts_and_the_line(errors: pd.DataFrame) -> None:
    s = H.summarise(
        errors,
        [
            ("mlperf/x", "not simulated: no replay"),
            ("vidur/y", "component skip"),
            ("llmperf/z", "not replayable: measured mean TTFT below the prefill floor"),
        ],
    )
    cells = pd.DataFrame(s["cells_table"]).set_index("cell_id")
    assert cells.loc["vllm-run/a", "within_target"]
    assert cells.loc["llmperf/c", "within_target"]  # its +50% throughput is fixed by construction
    assert not cells.loc["llmperf/b", "within_target"]
    assert not cells.loc["splitwise/e", "within_target"]
    assert cells.loc["agent-jct/d", "workload"] == "stand-in"
    assert s["cells"] == 4 and s["cells_within_target"] == 2  # the stand-in counts in neither
    assert s["line"] == (
        "2 of 4 replayable end-to-end cells within target (every judged metric within +-10%); stand-in "
        "workload, reported apart: 0 of 1; 1 not replayable, listed apart with the reason; 1 not simulated"
    )
    assert s["not_replayable"] == 1 and s["not_simulated"] == 1
    assert s["metrics_judged"] == 6 and s["metrics_met"] == 4 and s["metrics_not_judged"] == 2


def test_groups_never_mix_the_stand_in(errors: pd.DataFrame) -> None:
    g = H.group_mape(H.e2e_table(errors))
    assert set(g.loc[g["source"] == "agent-jct", "workload"]) == {"stand-in"}
    lp = g[(g["source"] == "llmperf") & (g["family"] == "ttft")]
    assert lp["mape_pct"].tolist() == pytest.approx([50.0])
    assert not ((g["source"] == "llmperf") & (g["family"] == "throughput_output_tok_s")).any()  # unjudged only


def test_not_simulated_keeps_end_to_end_cells_only() -> None:
    ns = H.not_simulated(
        [
            {"cell_id": "llmperf/db/run1/a5000/fp8", "reason": "GPU not in the catalog"},
            {"cell_id": "vidur/a40/phi-2/tp1", "reason": "non-gated MLP"},
        ]
    )
    assert ns["cell_id"].tolist() == ["llmperf/db/run1/a5000/fp8"]
