"""``query`` over compare / sweep folders keeps runs apart; ``collect`` says why a file failed;
``query`` rounds floats and ``collect`` says which files each format reads."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.query import cell, query, views
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

runner = CliRunner()


def test_compare_folder_tables_get_a_preset_column(tmp_path) -> None:
    write_trace(tmp_path / "tr", make_trace([[(300, 10, 0.2), (400, 10, None)]] * 3))
    out = tmp_path / "cmp"
    res = runner.invoke(
        app, ["compare", "--trace", str(tmp_path / "tr"), "--out", str(out), "--presets", "vllm,agent-affinity"]
    )
    assert res.exit_code == 0, res.output
    df = query("select preset, count(*) as n from programs group by 1 order by 1", out)
    assert df.to_dict(orient="records") == [{"preset": "agent-affinity", "n": 3}, {"preset": "vllm", "n": 3}]
    assert set(views(out)) >= {"compare", "programs", "turns", "instances"}
    turns = query("select * from turns", out)
    assert turns.columns[0] == "preset" and len(turns) == 2 * 6  # each preset's own rows, labelled
    cmp = query("select preset from compare", out)  # the folder's own table stays as it is
    assert sorted(cmp["preset"]) == ["agent-affinity", "vllm"]
    cli = runner.invoke(
        app, ["query", "select preset, count(*) as n from programs group by 1 order by 1", "--data", str(out), "--json"]
    )
    assert cli.exit_code == 0 and json.loads(cli.output) == [
        {"preset": "agent-affinity", "n": 3},
        {"preset": "vllm", "n": 3},
    ]


def test_a_folder_of_sweeps_stacks_their_results_with_a_sweep_column(tmp_path) -> None:
    import pandas as pd

    for name, jct in (("small", 1.0), ("large", 2.0)):
        part = tmp_path / name / "results" / "cell_group=all"
        part.mkdir(parents=True)
        (tmp_path / name / "sweep.json").write_text("{}")
        pd.DataFrame({"cell_id": [f"{name}-1"], "jct_mean_s": [jct]}).to_parquet(part / "c1.parquet")
    df = query("select sweep, jct_mean_s from results order by 1", tmp_path)
    assert df.to_dict(orient="records") == [
        {"sweep": "large", "jct_mean_s": 2.0},
        {"sweep": "small", "jct_mean_s": 1.0},
    ]
    one = query("select count(*) as n from results", tmp_path / "small")  # a sweep folder itself: as before
    assert int(one["n"].iloc[0]) == 1


def test_a_simulate_folder_is_queried_as_before(tmp_path) -> None:
    write_trace(tmp_path / "tr", make_trace([[(300, 10, None)]] * 2))
    res = runner.invoke(app, ["simulate", "--trace", str(tmp_path / "tr"), "--out", str(tmp_path / "s"), "--quiet"])
    assert res.exit_code == 0, res.output
    df = query("select * from programs", tmp_path / "s")
    assert len(df) == 2 and "preset" not in df.columns and "run" not in df.columns


def test_collect_of_one_corrupt_file_says_why(tmp_path) -> None:
    bad = tmp_path / "x.traj.json"
    bad.write_text('{"broken": ')
    res = runner.invoke(app, ["collect", "mini-swe-agent", str(bad), "--out", str(tmp_path / "out")])
    assert res.exit_code == 1
    text = " ".join(res.output.split())
    assert "nothing could be ingested" in text and "JSONDecodeError" in text and "x.traj.json" in text
    assert not (tmp_path / "out").exists()
    folder = tmp_path / "dir"
    folder.mkdir()
    shutil.copy(bad, folder / "y.traj.json")
    res = runner.invoke(app, ["collect", "mini-swe-agent", str(folder), "--out", str(tmp_path / "out")])
    assert res.exit_code == 1 and "JSONDecodeError" in " ".join(res.output.split())


def test_query_prints_floats_to_four_significant_digits_unless_raw(tmp_path) -> None:
    import pandas as pd

    pd.DataFrame({"name": ["a"], "third": [1 / 3], "big": [123456.789], "tiny": [1.23456e-5], "n": [7]}).to_parquet(
        tmp_path / "t.parquet"
    )
    sql = "select * from t"
    res = runner.invoke(app, ["query", sql, "--data", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    cells = res.output.splitlines()[3].split("│")[1:-1]
    assert [c.strip() for c in cells] == ["a", "0.3333", "123457", "1.235e-05", "7"]
    raw = runner.invoke(app, ["query", sql, "--data", str(tmp_path), "--raw"], env={"COLUMNS": "200"})
    assert raw.exit_code == 0 and "0.3333333333333333" in raw.output and "123456.789" in raw.output
    as_json = runner.invoke(app, ["query", sql, "--data", str(tmp_path), "--json"])
    assert json.loads(as_json.output)[0]["third"] == round(1 / 3, 10)  # JSON as pandas writes it, not rounded


def test_cell_rounds_finite_floats_only() -> None:
    assert [cell(v, 4) for v in (0.5, 9999.7, -0.001234567, 12.3456789, 2.0)] == [
        "0.5",
        "10000",
        "-0.001235",
        "12.35",
        "2",
    ]
    assert [cell(v, 4) for v in (float("nan"), float("inf"), 3, "x", None)] == ["nan", "inf", "3", "x", "None"]
    assert cell(1 / 3, None) == "0.3333333333333333"


def test_collect_says_which_files_each_format_reads(tmp_path) -> None:
    from collectors import FILES

    (tmp_path / "notes.txt").write_text("hello\n")
    res = runner.invoke(app, ["collect", "auto", str(tmp_path), "--out", str(tmp_path / "out")], env={"COLUMNS": "200"})
    assert res.exit_code == 1 and "format not recognised" in res.output
    assert all(f"{name}" in res.output and files in res.output for name, files in FILES.items())
    res = runner.invoke(
        app, ["collect", "mooncake", str(tmp_path), "--out", str(tmp_path / "out")], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 1 and f"no mooncake files found; mooncake reads {FILES['mooncake']}" in res.output
    res = runner.invoke(app, ["collect", "moncake", str(tmp_path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 1 and "(did you mean 'mooncake'?)" in res.output
