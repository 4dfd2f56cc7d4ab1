"""``agentreplay validate``: the report on small subsets of the real measured data (a copied vLLM run given with
``--measured``, one GPU profile folder), its error table and its self-contained HTML."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import agentreplay.cli.validate  # noqa: F401  (registers the commands)
from agentreplay.cli.app import app
from agentreplay.perf import list_gpus, load_gpu
from tests.conftest import shared_path
from validation import validate as V
from validation.catalog import PACKAGED
from validation.measured import collect_path
from validation.report import data as R

VLLM_RUN = ("measurements", "serving-vllm-llmservingsim")
RTX4090_PROFILE = ("measurements", "profiles-llmservingsim", "profiler", "perf", "RTX4090")


def check_errors(df: pd.DataFrame) -> None:
    assert list(df.columns) == V.COLUMNS
    assert set(df["role"]) <= {"calibration", "validation"}
    assert np.allclose(df["rel_error"], df["simulated"] / df["measured"] - 1.0)
    assert (df["measured"] > 0).all() and (df["simulated"] > 0).all()


def check_report(out: Path, heatmap: str) -> None:
    md = (out / "report.md").read_text()
    assert "## End to end: the headline" in md and "end-to-end cells within target" in md.splitlines()[2]
    assert "![parity.png](parity.png)" in md
    for name in ("parity.png", heatmap):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 2 and "<table>" in html
    assert 'src="parity.png"' not in html and "src='parity.png'" not in html  # embedded, not linked


@pytest.fixture(scope="module")
def vllm_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    src = shared_path(*VLLM_RUN)
    root = tmp_path_factory.mktemp("vllm")
    copy = root / "copied-run"
    shutil.copytree(src / "bench", copy / "bench")
    out = root / "report"
    res = CliRunner().invoke(
        app, ["validate", "--out", str(out), "--measured", str(copy), "--no-default-sources", "--quick"]
    )
    return out, copy, res


def test_measured_path_is_detected_and_validated(vllm_report: tuple[Path, Path, object]) -> None:
    out, copy, res = vllm_report
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    summary = json.loads((out / "summary.json").read_text())
    assert [o["collector"] for o in summary["sources"]] == ["vllm-run"]
    assert summary["sources"][0]["path"] == str(copy)
    df = pd.read_parquet(out / "errors.parquet")
    check_errors(df)
    assert set(df["source"]) == {"vllm-run"} and set(df["role"]) == {"validation"}
    metrics = set(df["metric"])
    for m in ("ttft", "tpot", "e2e"):
        assert {f"{m}_mean_s", f"{m}_p50_s", f"{m}_p90_s", f"{m}_p99_s"} <= metrics
    assert set(summary["vllm_run_pct"]) >= {"ttft_mean_s", "tpot_mean_s", "e2e_mean_s"}
    row = df[df["metric"] == "ttft_mean_s"].iloc[0]
    assert summary["vllm_run_pct"]["ttft_mean_s"] == pytest.approx(row["rel_error"] * 100)
    # the same run with the other pricers, and (RTX 4090: tile form) with mixed attention priced apart
    assert set(summary["pricer_vllm_run_pct"]) == {"refined", "table", "roofline:apart", "refined:apart"}
    assert set(summary["pricer_vllm_run_pct"]["table"]) >= {"ttft_mean_s", "tpot_mean_s", "e2e_mean_s"}


def test_vllm_report_files(vllm_report: tuple[Path, Path, object]) -> None:
    out, _, _ = vllm_report
    check_report(out, "heatmap_end_to_end.png")
    assert (out / "cdf_vllm-run.png").exists()
    assert "cdf_vllm-run.png" in (out / "report.md").read_text()


def test_component_subset_is_one_calibration_cell(tmp_path: Path) -> None:
    """The RTX 4090's only profile cell calibrates as a whole (validation.protocol.rules): no component row of it
    validates; the table pricer's in-cell rows are table fidelity, not validation."""
    src = shared_path(*RTX4090_PROFILE)
    summary = V.run(tmp_path, [str(src)], defaults=False, quick=True)
    df = pd.read_parquet(tmp_path / "errors.parquet")
    check_errors(df)
    assert set(df["role"]) == {"calibration"}  # one whole cell, one role
    assert set(summary["component_mape_pct"]) == {"rtx4090"}
    ops = pd.read_parquet(tmp_path / "component_ops.parquet")
    assert {"qkv_proj", "attention_decode"} <= set(ops["group"])
    check_report(tmp_path, "heatmap_components.png")
    pr = pd.read_parquet(tmp_path / "pricers.parquet")  # the pricer comparison on the same points
    assert set(pr["pricer"]) == {"roofline", "refined", "table"}
    assert np.allclose(pr["rel_error"], pr["simulated"] / pr["measured"] - 1.0)
    assert set(pr.loc[pr["pricer"] != "table", "role"]) == {"calibration"}
    assert set(pr.loc[pr["pricer"] == "table", "role"]) == {"fidelity"}  # no TP>1 cell: no table validation
    roof = pr[(pr["pricer"] == "roofline")].reset_index(drop=True)
    base = df[df["metric"].isin(roof["metric"].unique())]
    assert sorted(roof["simulated"]) == pytest.approx(sorted(base["simulated"]), rel=1e-12)  # same pricer
    tab = pd.read_parquet(tmp_path / "pricer_ops.parquet")
    tab = tab[tab["pricer"] == "table"]
    assert set(tab["role"]) == {"fidelity"}
    gemm = sorted(ops.loc[ops["group"] == "gate_up_proj", "num_tokens"])
    assert sorted(tab.loc[tab["group"] == "gate_up_proj", "num_tokens"]) == gemm[1::2]  # the held-out sizes
    report = (tmp_path / "report.md").read_text()
    assert "## Where each GPU's parameters come from" in report
    assert "GPUs without any measured profile (" in report and "b200 from h100-sxm" in report


def test_gpu_provenance_marks_borrowed_parameters() -> None:
    """Every catalog GPU is listed; the ones with no measured profile (B200, H200) say whose efficiencies they
    carry, the profiled ones how many calibration points fitted them; cells are counted from the errors table."""
    errors = pd.DataFrame({"gpu": ["h100-sxm", "h100-sxm", "rtx4090"], "cell_id": ["a", "b", "c"]})
    prov = R.gpu_provenance(errors).set_index("gpu")
    assert set(prov.index) == set(list_gpus())
    for g in ("b200", "h200"):
        assert prov.loc[g, "borrowed from"] == "h100-sxm" and prov.loc[g, "measured cells"] == 0
        assert prov.loc[g, "efficiencies"] == "no measured profile: those of h100-sxm"
    assert prov.loc["h100-sxm", "borrowed from"] == "" and prov.loc["h100-sxm", "measured cells"] == 2
    assert prov.loc["h100-sxm", "efficiencies"] == "fitted on its own profiles"
    assert prov.loc["b200", "operator points (cal. / val.)"] == "0 / 0"
    assert prov.loc["b200", "bf16 TFLOPS"] == load_gpu("b200").bf16_tflops  # datasheet peaks from the catalog
    ref = R.refinement_table().set_index("gpu")
    assert ref.loc["h200", "from"] == "no measured profile: those of h100-sxm"
    assert ref.loc["rtx4090", "from"] == "fitted on its own profiles"


def test_unrecognised_measured_path(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing to see")
    with pytest.raises(ValueError, match="no registered measured-data collector"):
        collect_path(tmp_path)
    res = CliRunner().invoke(
        app, ["validate", "--out", str(tmp_path / "o"), "--measured", str(tmp_path), "--no-default-sources"]
    )
    assert res.exit_code == 1


def test_only_uncomparable_component_cells_fail_with_the_reason(tmp_path: Path) -> None:
    """A user source whose every component cell is skipped (Vidur profile of phi-2: a non-gated MLP the
    performance model does not price) exits 1 naming the cell and why, instead of a bare pandas error."""
    src = shared_path("measurements", "profiles-vidur", "data", "profiling", "compute", "h100", "microsoft", "phi-2")
    res = CliRunner().invoke(
        app, ["validate", "--out", str(tmp_path / "o"), "--measured", str(src), "--no-default-sources"]
    )
    assert res.exit_code == 1
    text = " ".join(res.output.replace("│", " ").split())  # the message may be wrapped in a box
    assert "vidur/h100-sxm/phi-2/tp1" in text and "non-gated MLP" in text


def test_whole_model_iterations_alone_are_validated(tmp_path: Path) -> None:
    """Splitwise's perf_model.csv on its own: whole-model iterations only, no operator profile (the pricer
    comparison, which is per operator, is left out rather than failing)."""
    src = shared_path("measurements", "profiles-splitwise", "perf_model.csv")
    out = tmp_path / "o"
    res = CliRunner().invoke(
        app, ["validate", "--out", str(out), "--measured", str(src), "--no-default-sources", "--quick"]
    )
    assert res.exit_code == 0, res.output
    df = pd.read_parquet(out / "errors.parquet")
    check_errors(df)
    assert {"prefill_iteration_s", "decode_iteration_s"} <= set(df["metric"])
    assert not (out / "pricers.parquet").exists()


def test_validate_refuses_when_the_measured_data_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-shared"
    monkeypatch.setenv("AGENTREPLAY_MEASUREMENTS", str(missing))
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["validate", "--quick", "--out", str(out)])
    assert res.exit_code != 0
    assert str(missing) in res.output and "--bundled-only" in res.output
    assert not out.exists()  # nothing half-written


def test_bundled_only_validates_the_committed_live_comparisons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_MEASUREMENTS", str(tmp_path / "no-shared"))
    s = V.run(tmp_path / "report", quick=True, bundled_only=True)
    cells = {c["cell_id"].split("/")[0] for c in s["end_to_end"]["cells_table"]}
    assert cells == {"live-vllm-cpu"}


def test_validate_prices_with_the_catalog_folder_given(tmp_path: Path) -> None:
    """``--catalog DIR``: the folder's gpus.toml prices the cells (here the H100's, made slower; the A100's is
    the packaged one); a gpus.toml file instead of its folder is refused, naming the folder to pass."""
    src = shared_path("measurements", "profiles-splitwise", "perf_model.csv")
    cat = tmp_path / "catalog"
    cat.mkdir()
    text = PACKAGED.gpus_file.read_text()
    start = text.index('[gpu."h100-sxm".efficiency]\n')
    block = text[start : text.index("\n\n", start)]
    slower = "\n".join(
        "kernel_overhead_us = 50.0" if ln.startswith("kernel_overhead_us") else ln for ln in block.split("\n")
    )
    assert slower != block
    (cat / "gpus.toml").write_text(text.replace(block, slower))
    runs = {}
    for name, extra in (("packaged", []), ("own", ["--catalog", str(cat)])):
        out = tmp_path / name
        args = ["validate", "--out", str(out), "--measured", str(src), "--no-default-sources", "--quick", *extra]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        runs[name] = pd.read_parquet(out / "errors.parquet")
    a, b = runs["packaged"], runs["own"]
    assert a.drop(columns=["simulated", "rel_error"]).equals(b.drop(columns=["simulated", "rel_error"]))
    h100 = (a["gpu"] == "h100-sxm").to_numpy()
    assert h100.any() and (~h100).any()
    assert (b["simulated"].to_numpy()[h100] > a["simulated"].to_numpy()[h100]).all()
    assert (b["simulated"].to_numpy()[~h100] == a["simulated"].to_numpy()[~h100]).all()
    bad = CliRunner().invoke(app, ["validate", "--out", str(tmp_path / "x"), "--catalog", str(cat / "gpus.toml")])
    assert bad.exit_code == 1
    assert "pass its folder" in " ".join(bad.output.replace("│", " ").split())
