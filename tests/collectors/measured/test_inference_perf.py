"""The inference-perf collector: native folders, error tables, testdata and index merged per run; bad input named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.measured.inference_perf import InferencePerfCollector
from tests.collectors.measured import ip_fixtures as F
from tests.conftest import shared_path


def _collect(root: Path):
    col = InferencePerfCollector()
    assert col.detect(root)
    return col.collect(root)


def _cfg(res, cid: str) -> dict:
    cells = res.tables["cells"].set_index("cell_id")
    return json.loads(cells.loc[cid, "config_json"])


def test_native_and_table_join_by_value_and_keep_windows_apart(tmp_path: Path) -> None:
    res = _collect(F.campaign(tmp_path))
    ids = set(res.tables["cells"]["cell_id"])
    gt = f"inference-perf/{F.GT}"
    # the native folder joined the table's run (same stage-0 E2E), not a run of its own
    assert {f"{gt}/stage0", f"{gt}/stage1", f"{gt}/run", f"{gt}/first300"} <= ids
    assert not any(F.NATIVE in i for i in ids)
    cfg = _cfg(res, f"{gt}/stage0")
    assert cfg["aliases"] == [F.NATIVE]
    assert cfg["shared_prefix"]["num_groups"] == 2 and cfg["shared_prefix"]["num_prompts_per_group"] == 3
    assert "prompt_pool" not in cfg["assumed"]  # resolved by the run itself
    assert cfg["stages"] == [[2.0, 10.0], [4.0, 10.0]]
    m = res.tables["metrics"]
    got = m[(m["cell_id"] == f"{gt}/stage0")].set_index("metric")["value"]
    assert got["e2e_mean_s"] == pytest.approx(1.9)
    assert got["itl_mean_s"] == pytest.approx((1.9 - 0.025) / (237.5 - 1))
    first = m[(m["cell_id"] == f"{gt}/first300")].set_index("metric")["value"]
    assert first["e2e_mean_s"] == pytest.approx(2.1)  # the window's own actual, not the stage's
    assert _cfg(res, f"{gt}/first300")["window_requests"] == 300


def test_peers_are_kept_with_the_actual_they_were_scored_against(tmp_path: Path) -> None:
    res = _collect(F.campaign(tmp_path))
    p = res.tables["peers"]
    row = p[(p["cell_id"] == f"inference-perf/{F.GT}/stage1") & (p["simulator"] == "vidur")]
    row = row.set_index("metric")
    assert row.loc["e2e_mean_s", "predicted"] == pytest.approx(2.3 * 0.8)
    assert row.loc["e2e_mean_s", "actual"] == pytest.approx(2.3)
    assert set(p[p["cell_id"].str.endswith("first300")]["simulator"]) == {"llmservingsim"}


def test_testdata_supplies_kv_blocks_and_workload_as_written(tmp_path: Path) -> None:
    res = _collect(F.campaign(tmp_path))
    cfg = _cfg(res, f"inference-perf/{F.TD}/stage0")
    assert cfg["total_kv_blocks"] == 5000 and cfg["cpu_kv_blocks"] == 100
    assert cfg["stages"] == [[5.0, 600.0]]
    assert cfg["shared_prefix"]["question_len"] == 466
    # written as 11 x 4 with the alias keys, resolved as inference-perf did in the runs that record it
    assert (cfg["shared_prefix"]["num_groups"], cfg["shared_prefix"]["num_prompts_per_group"]) == (10, 10)
    assert "11 x 4" in cfg["assumed"]["prompt_pool"]


def test_overloaded_runs_are_flagged_not_replayable(tmp_path: Path) -> None:
    res = _collect(F.campaign(tmp_path))
    cfg = _cfg(res, f"inference-perf/{F.OVER}/stage0")
    assert cfg["replayable"] is False
    assert "exceeds the decode time" in cfg["not_replayable"]
    assert cfg["assumed"]["workload"].startswith("preset 'reasoning'")
    assert _cfg(res, f"inference-perf/{F.GT}/stage0")["replayable"] is True


def test_failed_requests_make_a_run_not_replayable(tmp_path: Path) -> None:
    F.native_folder(tmp_path, failures=3)
    res = _collect(tmp_path)
    cfg = _cfg(res, f"inference-perf/{F.NATIVE}/stage0")
    assert cfg["replayable"] is False and "3 of 13 requests failed" in cfg["not_replayable"]


def test_any_subset_of_the_files_is_accepted(tmp_path: Path) -> None:
    main, _ = F.error_tables(tmp_path)
    res = _collect(main)  # one error table alone
    assert len(res.tables["cells"]) == 4  # GT stage0, stage1; TD stage0; OVER stage0
    cfg = _cfg(res, f"inference-perf/{F.GT}/stage0")
    assert cfg["assumed"]["workload"].startswith("preset 'general'")


def test_bad_files_are_skipped_with_the_reason(tmp_path: Path) -> None:
    F.campaign(tmp_path)
    (tmp_path / "tables" / "bad_error_records.csv").write_text("simulator,model\nx,y\n")
    bad = tmp_path / "default_args" / "20260101-000001-llama-3-1-8b-tp1-codegen"
    (bad / "results").mkdir(parents=True)
    (bad / "exp-config.yaml").write_text("model: m\ntensor_parallelism: 1\n")
    (bad / "results" / "config.yaml").write_text("data: {type: random}\nload: {type: constant}\n")
    res = InferencePerfCollector().collect(tmp_path)
    reasons = {Path(s.path).name: s.reason for s in res.skips}
    assert "missing column(s)" in reasons["bad_error_records.csv"]
    assert "only shared_prefix prompts are replayed" in reasons[bad.name]
    assert len(res.tables["cells"])  # the good files still collected


def test_a_resolved_multi_turn_run_is_refused_not_replayed_as_single_turn(tmp_path: Path) -> None:
    import yaml

    d = F.native_folder(tmp_path)
    cfg = yaml.safe_load((d / "results" / "config.yaml").read_text())
    cfg["data"]["shared_prefix"]["enable_multi_turn_chat"] = True
    (d / "results" / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = InferencePerfCollector().collect(tmp_path)
    assert not len(res.tables["cells"])
    assert "multi-turn user sessions" in res.skips[0].reason and F.NATIVE in res.skips[0].path


@pytest.mark.shared
def test_the_shared_campaign() -> None:
    root = shared_path("measurements", "serving-vllm-inference-sim")
    res = InferencePerfCollector().collect(root)
    cells = res.tables["cells"]
    runs = {json.loads(c)["run"] for c in cells["config_json"]}
    assert len(runs) == 41
    apart = {json.loads(c)["run"] for c in cells["config_json"] if not json.loads(c)["replayable"]}
    assert apart == {
        "12-mixtral-8x7b-tp2-reasoning",
        "27-mixtral-8x7b-tp2-general-2",
        "20260217-170634-llama-2-7b-tp1-reasoning",
        "20260218-065057-llama-2-70b-hf-tp4-reasoning",
        "20260218-160939-codellama-34b-tp2-reasoning",
    }
    assert set(cells["gpu"]) == {"h100-sxm"}
    assert {"blis-trained-physics", "llmservingsim", "vidur", "aiconfigurator-estimate"} <= set(
        res.tables["peers"]["simulator"]
    )
    assert not res.skips
