"""Error bands: comparable validation cells by GPU and model class, widening when none match."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from agentreplay import bands as B
from validation.report import bands as VB


def _r(cell: str, gpu_class: str, model_class: str, family: str, err: float) -> dict[str, object]:
    return {"cell_id": cell, "gpu_class": gpu_class, "model_class": model_class, "family": family, "error_pct": err}


RES = [
    _r("a", "workstation", "dense-small", "ttft", 10.0),
    _r("a", "workstation", "dense-small", "e2e", -20.0),
    _r("b", "workstation", "dense-small", "ttft", -30.0),
    _r("c", "datacenter", "dense-large", "e2e", 50.0),
    _r("d", "workstation", "dense-small", "itl", 4.0),
]


def test_classes_of_catalogue_entries() -> None:
    assert B.model_class("llama-3.1-8b") == "dense-small"
    assert B.model_class("llama-3.1-70b") == "dense-large"
    assert B.model_class("qwen3-30b-a3b") == "moe"
    assert B.model_class("not-a-model") == "other"
    assert B.gpu_class("h100-sxm") == "datacenter" and B.gpu_class("rtx3090") == "workstation"


def test_band_levels_widen_in_order() -> None:
    b = B.band(RES, "ttft_s", "rtx4090", "llama-3.1-8b")
    assert (b.mape_pct, b.mean_signed_pct, b.n_cells, b.level) == (20.0, -10.0, 2, "GPU and model class")
    assert b.text() == "+-20%, 2 comparable cells"
    b = B.band(RES, "jct_s", "h100-sxm", "llama-3.1-70b")  # e2e family, exact class match: cell c
    assert (b.mape_pct, b.n_cells, b.level) == (50.0, 1, "GPU and model class")
    b = B.band(RES, "jct_s", "h100-sxm", "llama-3.1-8b")  # no datacenter 8B cell: same model class, any GPU
    assert (b.mape_pct, b.n_cells, b.level) == (20.0, 1, "model class")
    b = B.band(RES, "ttft_s", "h100-sxm", "qwen3-30b-a3b")  # no MoE cell, no datacenter ttft: every cell
    assert (b.mape_pct, b.n_cells, b.level) == (20.0, 2, "all cells")
    assert B.band(RES, "throughput", "rtx4090", "llama-3.1-8b") is None  # no residual of that family
    assert B.band(RES, "tpot_s", "rtx4090", "llama-3.1-8b").mape_pct == 4.0  # LLMPerf ITL judges TPOT


def test_mixed_gpu_classes_get_no_band() -> None:
    s = {
        "cluster": {
            "gpu": "h100-sxm",
            "model": "llama-3.1-8b",
            "per_instance": [{"gpu": "h100-sxm"}, {"gpu": "rtx4090"}],
        }
    }
    assert B.bands_for(s, RES) == {}
    s["cluster"]["per_instance"] = [{"gpu": "rtx4090"}]
    assert set(B.bands_for(s, RES)) == {"jct_s", "ttft_s", "tpot_s"}


def _row(source: str, cell: str, metric: str, err: float, judged: bool = True) -> dict[str, object]:
    return {
        "source": source,
        "cell_id": cell,
        "gpu": "rtx3090",
        "model": "llama-3.1-8b",
        "dtype": "bf16",
        "tp": 1,
        "metric": metric,
        "measured": 1.0,
        "simulated": 1 + err,
        "rel_error": err,
        "role": "validation",
        "note": "",
        "judged": judged,
    }


def test_residuals_only_judged_measured_serving_metrics(tmp_path) -> None:
    errors = pd.DataFrame(
        [
            _row("llmperf", "l/1", "ttft_p90_s", 0.5),
            _row("llmperf", "l/1", "itl_mean_s", -0.1),
            _row("llmperf", "l/1", "throughput_output_tok_s", 0.3, judged=False),
            _row("agent-jct", "a/1", "jct_mean_s", 8.0),
            _row("splitwise", "s/1", "decode_iteration_s", 0.3),
            _row("vidur", "v/1", "layer_time_s", 0.1),
        ]
    )
    recs = VB.residuals(errors)
    assert [(r["metric"], r["family"], r["error_pct"]) for r in recs] == [
        ("ttft_p90_s", "ttft", 50.0),
        ("itl_mean_s", "itl", -10.0),
    ]
    path = VB.write(errors, tmp_path / "error_bands.json")
    assert B.load_residuals(path) == recs


def test_bad_band_file_names_the_file_and_field(tmp_path) -> None:
    p = tmp_path / "bands.json"
    p.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "residuals": [
                    {"cell_id": "x", "gpu_class": "w", "model_class": "m", "family": "ttft", "error_pct": "big"}
                ],
            }
        )
    )
    with pytest.raises(ValueError, match=r"bands.json.*residuals\[0\].error_pct = 'big'"):
        B.load_residuals(p)
    with pytest.raises(ValueError, match="not found"):
        B.load_residuals(tmp_path / "missing.json")


def test_packaged_bands_are_the_committed_reports() -> None:
    """The packaged error-band file is the one the committed validation report wrote (refresh both together:
    agentreplay validate --out reports/validation, then copy its error_bands.json to the catalog)."""
    from pathlib import Path

    committed = Path(__file__).resolve().parents[1] / "reports" / "validation" / "error_bands.json"
    assert B.PACKAGED.read_text() == committed.read_text()
    assert B.load_residuals()  # readable, and not empty


def test_closest_names_its_cells_matches_the_regime_and_marks_the_nearest() -> None:
    res = [
        {**_r("p", "workstation", "dense-small", "e2e", 4.0), "source": "vllm-run", "gpu": "rtx4090",
         "model": "llama-3.1-8b", "regime": "profiled"},
        {**_r("q", "workstation", "dense-small", "e2e", -40.0), "source": "llmperf", "gpu": "rtx3090",
         "model": "llama-3.1-8b", "regime": "unprofiled"},
    ]  # fmt: skip
    b = B.closest(res, "jct_s", "rtx4090", "llama-3.1-8b", "profiled")
    assert (b.mape_pct, b.n_cells, b.comparable, b.cells) == (4.0, 1, True, ("vllm-run rtx4090 llama-3.1-8b (1)",))
    assert B.closest(res, "jct_s", "rtx4090", "llama-3.1-8b").n_cells == 2  # no regime asked: both
    near = B.closest(res, "jct_s", "h100-sxm", "llama-3.1-70b", "unprofiled")
    assert not near.comparable and near.level == "all cells" and near.n_cells == 2
    assert near.error_text() == "simulator low by 18% on average (|error| 22%)"
    assert near.named(1) == "llmperf rtx3090 llama-3.1-8b (1) and 1 more group(s)"
