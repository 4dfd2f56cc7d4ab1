"""End-to-end out-of-cell replays (validation/e2e/out_of_cell.py): the efficiency swap changes only the GPU's
efficiency, and the table says what could not be replayed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agentreplay.perf import PerfModel, list_gpus, load_gpu, load_model
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import simulate
from validation.calibration import calibrate as K
from validation.calibration.calibrate import ComponentData
from validation.catalog import PACKAGED
from validation.e2e import out_of_cell as O
from validation.e2e.common import single_turn_trace
from validation.e2e.fit import write_vllm_run
from validation.measured import Measured, collect_path
from validation.protocol import crossval as X


def test_catalog_copy_swaps_one_gpus_efficiency_only(tmp_path: Path) -> None:
    g = load_gpu("rtx4090")
    eff = dataclasses.replace(g.efficiency, kernel_overhead_us=g.efficiency.kernel_overhead_us * 3 + 1.0)
    changed = K.with_efficiency(PACKAGED, "rtx4090", eff, tmp_path / "copy")
    path = changed.gpus_file
    got = changed.gpu("rtx4090")
    assert got.efficiency.kernel_overhead_us == pytest.approx(eff.kernel_overhead_us, rel=1e-3)
    for f in dataclasses.fields(eff):
        assert getattr(got.efficiency, f.name) == pytest.approx(getattr(eff, f.name), rel=1e-3, abs=1e-4), f.name
    assert dataclasses.replace(got, efficiency=g.efficiency) == g  # the datasheet numbers are untouched
    assert changed.gpus() == PACKAGED.gpus()
    for other in list_gpus():
        if other != "rtx4090":
            assert load_gpu(other, path) == load_gpu(other), other
    for name in ("roofline.toml", "tables.toml", "calibration.json", "engine_cost.json"):  # the rest: the same files
        assert changed.file(name).read_bytes() == PACKAGED.file(name).read_bytes(), name
        assert changed.file(name).parent == changed.folder, name


def _tables(tmp: Path) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(3)
    n = 24
    trace = single_turn_trace(
        [f"q{i}" for i in range(n)],
        np.arange(n) / 4.0,
        rng.integers(50, 600, n),
        rng.integers(20, 120, n),
        "llama-3.1-8b",
    )
    cfg = SimConfig().replace(
        hardware={"gpu": "rtx4090", "model": "llama-3.1-8b"},
        cache={"num_gpu_blocks": 2000},
        scheduler={"max_num_seqs": 256, "max_num_batched_tokens": 2048},
        workload={"arrival": "trace"},
    )
    res = simulate(trace, cfg, perf=PerfModel(load_gpu("rtx4090"), load_model("llama-3.1-8b")))
    d = write_vllm_run(
        tmp / "run",
        res,
        "NVIDIA GeForce RTX 4090",
        "meta-llama/Llama-3.1-8B-Instruct",
        dataset_path="sharegpt-sps4.jsonl",
    )
    m = Measured()
    collect_path(d, m)
    return {k: m.table(k) for k in ("cells", "component", "requests", "programs", "metrics")}


def test_logo_replay_with_the_shipped_efficiency_reproduces_the_shipped_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = _tables(tmp_path)
    data = ComponentData(
        ops=pd.DataFrame(columns=["gpu", "role", "cell_id"]),
        iterations=pd.DataFrame(),
        allreduce=pd.DataFrame(),
        specs={},
        tps={},
        cells=pd.DataFrame(),
    )
    own = load_gpu("rtx4090").efficiency
    slow = dataclasses.replace(own, kernel_overhead_us=own.kernel_overhead_us + 200.0)
    for eff, same in ((own, True), (slow, False)):
        monkeypatch.setattr(X, "logo_efficiencies", lambda *_a, e=eff, **_k: {"rtx4090": ("donor-x", e)})
        rows = O.out_of_cell_rows(tables, data)
        shipped = rows[rows["mode"] == "shipped"].set_index("metric")["simulated"]
        logo = rows[rows["mode"] == "logo"].set_index("metric")["simulated"]
        assert len(shipped) > 5 and set(shipped.index) == set(logo.index)
        if same:
            pd.testing.assert_series_equal(shipped, logo.loc[shipped.index], rtol=1e-3)
        else:  # a slower kernel launch lengthens every step: TPOT and E2E go up
            assert logo["tpot_mean_s"] > shipped["tpot_mean_s"] * 1.05
            assert logo["e2e_mean_s"] > shipped["e2e_mean_s"]
        lomo = rows[rows["mode"] == "lomo"]
        assert len(lomo) == 1 and lomo["metric"].isna().all()  # no profile cell at all: said, not replayed
        assert "no calibration cell of llama-3.1-8b" in lomo["note"].iloc[0]
    s = O.as_summary(rows)
    assert s["donors"] == {"rtx4090": "donor-x"}
    assert any(r["family"] == "tpot" and r["logo"] > r["shipped"] for r in s["table"])
    assert s["not_replayed"] and s["not_replayed"][0].startswith("rtx4090 lomo")
