"""An experiment's tables on disk and on the terminal: a named index becomes leading columns, metadata stays out."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from agentreplay.experiment.tables import about, about_of, plain_view, write


def test_tables_are_written_with_their_keys_and_metadata_is_not(tmp_path: Path) -> None:
    keyed = pd.DataFrame({"load": [4, 64], "jct_p90_s": [1.5, float("nan")]}).set_index("load")
    rows = pd.DataFrame({"program_id": ["a", "b"], "jct_s": [1.0, 2.0]})
    paths = write(tmp_path, {"jct": keyed, "programs": rows, "_about": about(title="t", notes=["x"])})
    assert sorted(p.name for p in paths) == ["jct.parquet", "programs.parquet"]
    assert list(pd.read_parquet(tmp_path / "jct.parquet").columns) == ["load", "jct_p90_s"]
    assert about_of({"_about": about(title="t", notes=["x"])}) == {"title": "t", "notes": ["x"]}


def test_any_table_prints_with_its_keys_first_and_numbers_as_text() -> None:
    keyed = pd.DataFrame({"load": [4], "budget": ["none"], "jct_s": [12345.6], "n": [1200]}).set_index(
        ["load", "budget"]
    )
    v = plain_view("thinking", keyed)
    assert (v.title, list(v.head), v.left) == ("thinking", ["load", "budget", "jct_s", "n"], 2)
    assert v.rows == [["4", "none", "12,346", "1,200"]]
