"""The results store and the summary flattening: fixed schema, atomic files, new summary keys normalised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from agentreplay.query import query
from agentreplay.sweep.spec import Param
from agentreplay.sweep.store import CORE_FIGURES, ResultStore
from agentreplay.sweep.worker import flatten_summary

P = [Param("tools.scale", "tools_scale", "scale", (0.5, 1.0), "float")]


def row(cell_id: str, status: str = "ok", **figures: object) -> dict:
    return {
        "cell_id": cell_id,
        "label": cell_id,
        "seed": 0,
        "status": status,
        "error": None,
        "attempts": 1,
        "wall_s": 0.1,
        "tools_scale": 0.5,
        **figures,
    }


def test_flatten_moves_the_unit_to_the_end_and_keeps_numbers_only() -> None:
    summary = {
        "jct_s": {"mean": 1.0, "p99": 2.0},
        "programs": 3,
        "preemptions": np.int64(4),
        "cluster": {"gpu": "h100-sxm", "num_gpu_blocks": 10},
        "engine": {"busy_s_per_instance": [1.0]},
        "tiers": {"dram": {"hit_rate": 0.5}},
        "flag": True,
    }
    flat = flatten_summary(summary)
    assert flat == {
        "jct_mean_s": 1.0,
        "jct_p99_s": 2.0,
        "programs": 3,
        "preemptions": 4,
        "cluster_num_gpu_blocks": 10,
        "tiers_dram_hit_rate": 0.5,
        "flag": True,
    }
    assert type(flat["preemptions"]) is int


def test_rows_are_one_file_each_and_failed_rows_have_null_figures(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results", P)
    store.write(row("a", jct_mean_s=1.5, programs=3), "scale_0.5")
    store.write(row("b", status="failed"), "scale_0.5")
    assert [p.name for p in store.files()] == ["a.parquet", "b.parquet"]
    assert not list((tmp_path / "results").rglob(".*"))
    df = query("select * from results order by cell_id", tmp_path)
    assert list(df["status"]) == ["ok", "failed"] and np.isnan(df["jct_mean_s"][1])
    assert set(df["cell_group"]) == {"scale_0.5"}
    assert ResultStore(tmp_path / "results", P).status == {"a": "ok", "b": "failed"}


def test_a_new_summary_key_is_added_to_earlier_files_by_normalize(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results", P)
    store.write(row("a", jct_mean_s=1.0), "g")
    store.write(row("b", jct_mean_s=2.0, new_figure=7), "g")
    store.write(row("c", status="failed"), "g")
    assert store.normalize() == 1  # only a.parquet lacked new_figure
    schemas = {pq.read_schema(f).remove_metadata() for f in store.files()}
    assert len(schemas) == 1
    names = next(iter(schemas)).names
    assert names[-1] == "new_figure" and {n for n, _ in CORE_FIGURES} <= set(names)
    df = query("select cell_id, new_figure from results order by cell_id", tmp_path)
    assert df["new_figure"].isna().tolist() == [True, False, True] and df["new_figure"][1] == 7.0
    reopened = ResultStore(tmp_path / "results", P)
    assert reopened.extras == {"new_figure"} and reopened.normalize() == 0
