"""Output folders are written as a whole and never replace a folder agentreplay did not write."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.outdir import MARKER, OutputDirError, owned, staged
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

runner = CliRunner()


@pytest.fixture()
def trace(tmp_path):
    write_trace(tmp_path / "tr", make_trace([[(200 + 50 * t, 10, 0.5) for t in range(3)] for _ in range(4)]))
    return str(tmp_path / "tr")


def test_staged_replaces_the_whole_folder_and_marks_it(tmp_path) -> None:
    out = tmp_path / "a" / "out"
    with staged(out, "simulate") as tmp:
        (tmp / "summary.json").write_text("{}")
        (tmp / "decisions.jsonl").write_text("old\n")
        assert not out.exists()  # nothing under the output name until the block succeeds
    with staged(out, "simulate") as tmp:
        (tmp / "summary.json").write_text('{"run": 2}')
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "summary.json"]
    assert json.loads((out / MARKER).read_text())["kind"] == "simulate"
    assert [p.name for p in out.parent.iterdir()] == ["out"]  # no temporary folder left beside it


def test_a_failed_run_keeps_the_old_folder_and_creates_nothing(tmp_path) -> None:
    out = tmp_path / "out"
    with staged(out, "simulate") as tmp:
        (tmp / "summary.json").write_text("1")
    with pytest.raises(RuntimeError), staged(out, "simulate") as tmp:
        (tmp / "summary.json").write_text("2")
        raise RuntimeError("boom")
    assert (out / "summary.json").read_text() == "1"
    fresh = tmp_path / "new" / "deeper" / "out"
    with pytest.raises(RuntimeError), staged(fresh, "validate"):
        raise RuntimeError("boom")
    assert not (tmp_path / "new").exists()  # the parents this call created are gone too


def test_foreign_folders_are_refused_and_legacy_outputs_recognised(tmp_path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(OutputDirError, match=r"not written by agentreplay.*notes\.txt"), staged(foreign, "simulate"):
        pass
    assert (foreign / "notes.txt").read_text() == "keep me"
    legacy = tmp_path / "legacy"  # written before the marker existed: only names simulate writes
    legacy.mkdir()
    (legacy / "summary.json").write_text("{}")
    (legacy / "turns.parquet").write_bytes(b"")
    assert owned(legacy, "simulate") and not owned(legacy, "sweep")
    dataset = tmp_path / "dataset"  # only names a validate run writes (*.md, *.json, *.parquet), but no errors.parquet
    dataset.mkdir()
    for name in ("MANIFEST.json", "PROVENANCE.md", "programs.parquet"):
        (dataset / name).write_text("x")
    assert not owned(dataset, "validate") and not owned(dataset, "trace")  # PROVENANCE.md: not a trace output
    (dataset / "errors.parquet").write_text("x")
    assert owned(dataset, "validate")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputDirError, match="not a folder"), staged(tmp_path / "afile", "simulate"):
        pass


def test_simulate_rerun_drops_the_stale_decision_log(tmp_path, trace) -> None:
    out = tmp_path / "sim"
    first = runner.invoke(app, ["simulate", "--trace", trace, "--out", str(out), "--decision-log", "--quiet"])
    assert first.exit_code == 0, first.output
    assert (out / "decisions.jsonl").exists()
    again = runner.invoke(app, ["simulate", "--trace", trace, "--out", str(out), "--quiet"])
    assert again.exit_code == 0, again.output
    assert not (out / "decisions.jsonl").exists()
    assert (out / "summary.json").exists() and (out / MARKER).exists()


def test_simulate_refuses_a_foreign_folder(tmp_path, trace) -> None:
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_bytes(b"\xff\xd8")
    res = runner.invoke(app, ["simulate", "--trace", trace, "--out", str(out), "--quiet"])
    assert res.exit_code == 1
    assert "not written by agentreplay" in res.output and "cat.jpg" in res.output
    assert [p.name for p in out.iterdir()] == ["cat.jpg"]


def test_compare_rerun_keeps_only_this_runs_presets(tmp_path, trace) -> None:
    out = tmp_path / "cmp"
    res = runner.invoke(app, ["compare", "--trace", trace, "--out", str(out), "--presets", "vllm,sglang"])
    assert res.exit_code == 0, res.output
    assert "…" not in res.output and "sglang" in res.output  # the piped table cuts nothing
    assert (out / "sglang" / "summary.json").exists()
    res = runner.invoke(app, ["compare", "--trace", trace, "--out", str(out), "--presets", "vllm", "--json"])
    assert res.exit_code == 0, res.output
    assert [r["preset"] for r in json.loads(res.stdout)] == ["vllm"]
    assert not (out / "sglang").exists() and (out / "vllm" / "summary.json").exists()


def test_validate_with_nothing_to_validate_leaves_no_folder(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "reports" / "x"
    res = runner.invoke(app, ["validate", "--measured", str(empty), "--no-default-sources", "--out", str(out)])
    assert res.exit_code == 1
    assert "error:" in res.output and str(empty) in res.output
    assert not out.exists() and not (tmp_path / "reports").exists()


def test_sweep_refuses_a_foreign_folder(tmp_path) -> None:
    out = tmp_path / "s"
    out.mkdir()
    (out / "thesis.tex").write_text("x")
    spec = tmp_path / "spec.toml"
    spec.write_text('[sweep]\ntrace = "datasets/swebench-verified"\n[grid]\n"hardware.instances" = [1]\n')
    res = runner.invoke(app, ["sweep", str(spec), "--out", str(out)])
    assert res.exit_code == 1 and "thesis.tex" in res.output
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]


def test_simulate_names_every_file_it_wrote_streamed_with_mechanisms(trace, tmp_path) -> None:
    """A streamed run with the footprint series and a replica failure writes their tables beside the three, and
    the closing line names exactly the files in the folder."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[footprint]\ninterval_s = 0.5\n[hardware]\ninstances = 2\n"
        '[failures]\nevents = [{instance = 0, at_s = 0.5, kind = "fail", recover_after_s = 1.0}]\n'
    )
    out = tmp_path / "out"
    res = runner.invoke(app, ["simulate", "-t", trace, "-c", str(cfg), "--stream", "--quiet", "-o", str(out)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("wrote "))
    named = sorted(line[len(f"wrote {out}/") :].split(", "))
    assert named == sorted(p.name for p in out.iterdir() if p.name != MARKER)
    assert {"footprint.parquet", "failover.parquet"} <= set(named)


def test_simulate_prints_the_replica_failures_of_a_disaggregated_run(trace, tmp_path) -> None:
    """A decode instance of a 1 + 2 disaggregated cluster fails and recovers: the run completes and the console
    table has the failures row with the summary's counts."""
    import json

    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[disagg]\nenabled = true\nprefill_instances = 1\ndecode_instances = 2\n"
        '[failures]\nevents = [{instance = 2, at_s = 0.3, kind = "fail", recover_after_s = 0.2}]\n'
    )
    out = tmp_path / "out"
    res = runner.invoke(app, ["simulate", "-t", trace, "-c", str(cfg), "-o", str(out)], terminal_width=400)
    assert res.exit_code == 0, res.output
    fo = json.loads((out / "summary.json").read_text())["failover"]
    row = next(x for x in res.output.splitlines() if "replica failures" in x)
    assert "failures / drains / recoveries 1 / 0 / 1" in row
    assert f"{fo['affected_calls']:,} calls affected ({fo['aborted_calls']:,} aborted)" in row


def test_sweep_interrupted_says_where_to_resume_in_one_line(tmp_path, monkeypatch) -> None:
    import agentreplay.sweep as S

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "run_sweep", interrupted)
    spec = tmp_path / "spec.toml"
    spec.write_text('[sweep]\ntrace = "datasets/swebench-verified"\n[grid]\n"hardware.instances" = [1]\n')
    res = runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "s")])
    assert res.exit_code == 130
    assert "interrupted: the finished cells are kept in" in res.output and "resume" in res.output
    assert "Traceback" not in res.output and "Aborted" not in res.output
