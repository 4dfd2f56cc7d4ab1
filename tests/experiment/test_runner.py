"""The experiment runner: cells kept and resumed, a folder holding one run, failures named, seeds combined, and the
same cells run in a process pool."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from agentreplay.experiment import ExperimentError, run_experiment
from agentreplay.experiment.runner import MANIFEST, STORE, Silent, plan
from agentreplay.sim.config import SimConfig
from tests.experiment.fake import EXPERIMENT as FAKE
from tests.experiment.fake import FakeParams as Params
from tests.experiment.helpers import tiny_trace


class Count(Silent):
    def __init__(self) -> None:
        self.ran: list[str] = []

    def done(self, cell) -> None:  # type: ignore[no-untyped-def]
        self.ran.append(cell.label)


def test_cells_are_kept_resumed_and_pruned(tmp_path: Path) -> None:
    trace, out = tiny_trace(tmp_path / "tr"), tmp_path / "out"
    first = Count()
    done = run_experiment(FAKE, Params(), SimConfig(), trace, out, workers=1, progress=first)
    assert first.ran == ["load 1", "load 2"] and done.ran == 2 and done.skipped == 0
    assert list(done.tables["jct"].index) == [1, 2]
    assert {p.name for p in out.iterdir()} >= {STORE, MANIFEST, "jct.parquet", "programs.parquet", "fake.md"}
    assert len(list((out / STORE).iterdir())) == 2
    again = Count()
    done = run_experiment(FAKE, Params(), SimConfig(), trace, out, workers=1, progress=again)
    assert again.ran == [] and done.skipped == 2  # resumed: nothing to run
    # other options: the cells they share with the last run stay, the rest of the folder is this run's
    (out / "fake.md").unlink()
    (out / "old.parquet").write_bytes(b"")
    done = run_experiment(FAKE, Params(loads=(2,)), SimConfig(), trace, out, workers=1)
    assert done.ran == 1 and done.skipped == 0  # a changed option changes the cells' identity
    assert len(list((out / STORE).iterdir())) == 1 and not (out / "old.parquet").exists()
    assert (out / "fake.md").read_text() == "1 loads\n"
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["experiment"] == "fake" and manifest["params"]["loads"] == [2]


def test_a_cell_that_cannot_run_is_named_and_the_finished_ones_stay(tmp_path: Path) -> None:
    trace, out = tiny_trace(tmp_path / "tr"), tmp_path / "out"
    with pytest.raises(ExperimentError, match=r"load 2 \(seed 0\): load 2: refused"):
        run_experiment(FAKE, Params(fail_at=2), SimConfig(), trace, out, workers=1)
    assert len(list((out / STORE).iterdir())) == 1  # load 1 finished, kept for a rerun


def test_interrupted_cells_leave_no_partial_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace, out = tiny_trace(tmp_path / "tr"), tmp_path / "out"
    from agentreplay.experiment import base

    real = base.Experiment.run
    calls: list[str] = []

    def stop_second(self, label, workload, cfg, folder):  # type: ignore[no-untyped-def]
        calls.append(label)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(self, label, workload, cfg, folder)

    monkeypatch.setattr(type(FAKE), "run", stop_second)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(FAKE, Params(), SimConfig(), trace, out, workers=1)
    assert [p.name.startswith("load-1.") for p in (out / STORE).iterdir()] == [True]
    monkeypatch.undo()
    done = run_experiment(FAKE, Params(), SimConfig(), trace, out, workers=1)
    assert (done.skipped, done.ran) == (1, 1)


def test_a_foreign_folder_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_bytes(b"\xff")
    with pytest.raises(ExperimentError, match=r"cat\.jpg"):
        run_experiment(FAKE, Params(), SimConfig(), tiny_trace(tmp_path / "tr"), out, workers=1)
    assert [p.name for p in out.iterdir()] == ["cat.jpg"]


def test_seeds_average_keyed_tables_and_stack_the_others(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "tr", [[(300, 12, 0.3), (340, 12, None)]] * 4)
    base = SimConfig().replace(workload={"arrival": "poisson", "rate_per_s": 5.0})
    one = [run_experiment(FAKE, Params(), base, trace, tmp_path / f"s{s}", seeds=[s], workers=1) for s in (0, 1)]
    both = run_experiment(FAKE, Params(), base, trace, tmp_path / "both", seeds=[0, 1], workers=1)
    mean = (one[0].tables["jct"]["jct_p50_s"] + one[1].tables["jct"]["jct_p50_s"]) / 2
    pd.testing.assert_series_equal(both.tables["jct"]["jct_p50_s"], mean)
    programs = both.tables["programs"]
    assert list(programs.columns[:1]) == ["seed"] and sorted(set(programs["seed"])) == [0, 1]
    assert len(programs) == 2 * len(one[0].tables["programs"])


def test_cell_names_say_label_and_seed_and_are_stable(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "tr")
    cells = plan(FAKE, SimConfig(), Params(), [0, 3], trace)
    assert [(c.label, c.seed) for c in cells] == [("load 1", 0), ("load 1", 3), ("load 2", 0), ("load 2", 3)]
    assert cells[1].key.startswith("load-1.seed3.") and cells[1].config.seed == 3
    assert [c.key for c in plan(FAKE, SimConfig(), Params(), [0, 3], trace)] == [c.key for c in cells]


def test_a_process_pool_runs_the_same_cells(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "tr")
    here = run_experiment(FAKE, Params(), SimConfig(), trace, tmp_path / "here", workers=1)
    pool = run_experiment(FAKE, Params(), SimConfig(), trace, tmp_path / "pool", workers=2)
    pd.testing.assert_frame_equal(pool.tables["jct"], here.tables["jct"])
    assert pool.ran == 2


def test_an_unmarked_folder_is_taken_only_when_it_holds_the_experiments_old_outputs(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "tr")
    old = tmp_path / "old"
    old.mkdir()
    (old / "fake.md").write_text("written before folders were marked\n")
    done = run_experiment(FAKE, Params(loads=(1,)), SimConfig(), trace, old, workers=1)
    assert done.ran == 1 and (old / "fake.md").read_text() == "1 loads\n"
    data = tmp_path / "data"  # Parquet files, but not this experiment's: never taken (nor pruned)
    data.mkdir()
    (data / "programs.parquet").write_bytes(b"")
    with pytest.raises(ExperimentError, match="not written by agentreplay"):
        run_experiment(FAKE, Params(loads=(1,)), SimConfig(), trace, data, workers=1)
    assert [p.name for p in data.iterdir()] == ["programs.parquet"]
