"""The validation protocol (validation/protocol/rules.py, validation/protocol/crossval.py): whole-cell roles, the
nearest-GPU rule, cross-validation that reads calibration cells only, the constants registry and its Markdown."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentreplay.perf import list_gpus, load_gpu
from tests.validation.calibration.test_calibration import synthetic
from validation.calibration import calibrate as K
from validation.catalog import PACKAGED, Catalog
from validation.protocol import constants as PC
from validation.protocol import crossval as X
from validation.protocol import render as PR
from validation.protocol import rules as P

PROFILED = ("a100-80gb", "a40", "a6000", "h100-sxm", "rtx3090", "rtx4090", "rtxpro6000")


def test_roles_are_per_whole_cell() -> None:
    assert P.cell_role("llmservingsim-perf/rtx4090/llama-3.1-8b/bf16/tp1", 1) == "calibration"
    assert P.cell_role("llmservingsim-v0/h100-sxm/llama-3.1-70b/tp4", 4) == "validation"
    assert P.cell_role("splitwise/a100-80gb/llama-2-70b/tp2", 2) == "validation"
    assert [P.cell_role("vidur/network/h100_dgx/all_reduce/n2-pernode2", n) for n in (2, 4, 8)] == [
        "calibration",
        "validation",
        "calibration",
    ]
    with pytest.raises(ValueError, match="no TP degree"):
        P.cell_role("vidur/a40/llama-2-7b/tp1", None)
    data = K.component_data(synthetic(tps=(1, 2)))
    per_cell = data.ops.groupby("cell_id")["role"].nunique()
    assert (per_cell == 1).all()  # no cell has points on both sides


def test_nearest_rule_reproduces_the_catalogue_borrowing() -> None:
    """The declared rule picks, among the profiled GPUs, the GPU each unprofiled catalogue GPU borrows from."""
    specs = {g: load_gpu(g) for g in list_gpus()}
    pool = [specs[g] for g in PROFILED]
    for g, src in K.NEAREST.items():
        assert P.nearest_gpu(specs[g], pool) == src, g
    assert P.nearest_gpu(specs["h100-sxm"], pool) != "h100-sxm"  # never itself (leave-one-GPU-out)
    assert P.nearest_gpu(specs["h100-sxm"], [specs["h100-sxm"]]) is None


def test_table_cv_reads_calibration_cells_only() -> None:
    """Scaling every validation-cell measurement changes no CV score; changing a calibration cell does."""
    m = synthetic(tps=(1, 2))
    data = K.component_data(m)
    cv = X.table_cv(data)
    assert set(cv["cell_id"]) == {c for c in data.ops["cell_id"].unique() if c.endswith("/tp1")}
    assert set(cv["candidate"]) == {str(t) for t in X.TILE_CANDIDATES} | set(X.ROW_RULES)
    moved = data.ops.copy()
    val = moved["role"] == "validation"
    moved.loc[val, "measured_s"] *= 3.0
    full = data.full.copy()
    full.loc[full["tp"] == 2, "measured_s"] *= 3.0
    import dataclasses

    cv2 = X.table_cv(dataclasses.replace(data, ops=moved, full=full))
    assert np.allclose(cv["mape_pct"], cv2["mape_pct"])
    bent = data.full.copy()
    bent.loc[(bent["tp"] == 1) & (bent["group"] == "qkv_proj"), "measured_s"] *= np.linspace(
        0.7, 1.3, int(((bent["tp"] == 1) & (bent["group"] == "qkv_proj")).sum())
    )
    ops3 = data.ops.copy()
    sel = (ops3["tp"] == 1) & (ops3["group"] == "qkv_proj")
    key = ["cell_id", "group", "probe", "num_tokens", "batch_size", "context_tokens"]
    ops3.loc[sel, "measured_s"] = (
        ops3.loc[sel, key].merge(bent[[*key, "measured_s"]], on=key, how="left")["measured_s"].to_numpy()
    )
    cv3 = X.table_cv(dataclasses.replace(data, ops=ops3, full=bent))
    assert not np.allclose(cv["mape_pct"], cv3["mape_pct"])


def test_choose_takes_the_lowest_cv_score() -> None:
    cv = pd.DataFrame(
        {
            "tunable": ["t"] * 4,
            "candidate": ["a", "a", "b", "b"],
            "gpu": "g",
            "cell_id": ["c1", "c2", "c1", "c2"],
            "points": 10,
            "mape_pct": [5.0, 1.0, 2.0, 3.0],
        }
    )
    assert X.choose(cv, "t") == "b"  # mean 2.5 < 3.0, each cell one fold
    s = X.cv_scores(cv).set_index("candidate")
    assert s.loc["a", "cv_score_pct"] == pytest.approx(3.0) and s.loc["b", "folds"] == 2


def test_constants_registry_says_where_each_comes_from() -> None:
    rows = PC.catalog_rows(
        PACKAGED,
        {
            "h100-sxm": {"fitted": ["compute_efficiency"]},
            "h200": {"fitted": ["compute_efficiency"], "calibrated_from": "h100-sxm"},
        },
        {},
        {"h100-sxm": ["vidur/h100-sxm/llama-2-7b/tp1"]},
        K.NEAREST,
    )
    got = {(r["scope"], r["constant"]): r for r in rows}
    assert got[("h100-sxm", "compute_efficiency")]["provenance"] == "fitted"
    assert "vidur/h100-sxm/llama-2-7b/tp1" in got[("h100-sxm", "compute_efficiency")]["detail"]
    assert got[("h200", "compute_efficiency")]["provenance"] == "borrowed"
    pre = got[("h100-sxm", "attn_prefill_efficiency")]
    assert pre["provenance"] == "hand-set" and pre["detail"].startswith("hand-set, not fitted")
    assert got[("h100-sxm", "bf16_tflops")]["provenance"] == "datasheet"
    assert {r["provenance"] for r in rows} <= set(PC.PROVENANCE)
    glob = {r["constant"]: r for r in PC.global_rows([])}
    assert glob["GEMM_TILE_TOKENS"]["provenance"] == "chosen by CV"
    assert glob["DEFAULT_ACTIVATION_RESERVE_GIB"]["provenance"] == "hand-set"


def test_render_has_the_four_sections() -> None:
    summary = {
        "protocol": {
            "split": P.SPLIT,
            "constants": PC.global_rows([]),
            "cv_scores": [],
            "logo": [
                {
                    "gpu": "a40",
                    "pricer": "roofline",
                    "donor": "a100-80gb",
                    "logo_components_n": 3,
                    "logo_components_mape_pct": 9.7,
                    "own_components_mape_pct": 7.4,
                }
            ],
            "lomo": [],
            "table_fidelity": [{"gpu": "a40", "points": 5, "mape_pct": 1.2}],
        }
    }
    md = "\n".join(PR.render_protocol_markdown(summary))
    for h in (
        "## Validation protocol",
        "## Constants and where they come from",
        "## Out-of-cell errors: leave-one-GPU-out / leave-one-model-out",
        "## Table fidelity (in-cell interpolation; not validation)",
    ):
        assert h in md
    assert "| a40 | roofline | a100-80gb | 3 | 9.7 | 7.4 |" in md


def _two_gpus() -> K.ComponentData:
    from validation.measured import Measured

    a, b = synthetic(tps=(1,), gpu_name="h100-sxm"), synthetic(tps=(1,), gpu_name="a100-80gb")
    m = Measured()
    m.tables = {k: pd.concat([a.tables[k], b.tables[k]], ignore_index=True) for k in ("cells", "component")}
    return K.component_data(m)


def test_leave_one_gpu_out_never_reads_the_gpus_own_fit(tmp_path) -> None:
    """Changing the H100's own fitted efficiency changes its own-fit error, never its leave-one-GPU-out error."""
    import shutil

    for name in ("gpus.toml", "roofline.toml", "calibration.json", "tables.toml", "models.toml"):
        shutil.copy(PACKAGED.folder / name, tmp_path / name)
    data = _two_gpus()
    before = X.leave_one_gpu_out(data, Catalog.open(tmp_path)).set_index(["gpu", "pricer"])
    text = (tmp_path / "gpus.toml").read_text()
    head = '[gpu."h100-sxm".efficiency]\n'
    i = text.index(head)
    block = text[i:].split("\n\n", 1)[0]
    (tmp_path / "gpus.toml").write_text(
        text.replace(block, block.replace("compute_efficiency = ", "compute_efficiency = 0.3  # was ", 1))
    )
    after = X.leave_one_gpu_out(data, Catalog.open(tmp_path)).set_index(["gpu", "pricer"])
    assert before.loc[("h100-sxm", "roofline"), "donor"] == "a100-80gb"
    assert after.loc[("h100-sxm", "roofline"), "logo_components_mape_pct"] == pytest.approx(
        before.loc[("h100-sxm", "roofline"), "logo_components_mape_pct"], rel=1e-12
    )
    assert after.loc[("h100-sxm", "roofline"), "own_components_mape_pct"] != pytest.approx(
        before.loc[("h100-sxm", "roofline"), "own_components_mape_pct"], rel=1e-3
    )
    # the A100, whose donor is the H100, sees the change
    assert after.loc[("a100-80gb", "roofline"), "logo_components_mape_pct"] != pytest.approx(
        before.loc[("a100-80gb", "roofline"), "logo_components_mape_pct"], rel=1e-3
    )


def _two_models(scale: float = 1.0) -> K.ComponentData:
    """The synthetic H100 cell twice: as Llama-3.1-8B and relabelled Llama-2-7B (times x ``scale``)."""
    from validation.measured import Measured

    a = synthetic(tps=(1,))
    cells = a.tables["cells"].copy()
    comp = a.tables["component"].copy()
    cells["cell_id"] = cells["cell_id"].str.replace("llama-3.1-8b", "llama-2-7b")
    cells["model"] = "llama-2-7b"
    comp["cell_id"] = comp["cell_id"].str.replace("llama-3.1-8b", "llama-2-7b")
    comp["seconds"] = comp["seconds"] * scale
    m = Measured()
    m.tables = {
        "cells": pd.concat([a.tables["cells"], cells], ignore_index=True),
        "component": pd.concat([a.tables["component"], comp], ignore_index=True),
    }
    return K.component_data(m)


def test_leave_one_model_out_fits_without_the_held_out_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scaling the held-out model's measurements changes nothing the refit predicts for it (the refit never saw
    them); the other fold, fitted on that model alone, changes."""
    seen: list[pd.DataFrame] = []
    real = X.judged_rows

    def spy(*args: object, **kw: object) -> pd.DataFrame:
        out = real(*args, **kw)  # type: ignore[arg-type]
        seen.append(out)
        return out

    monkeypatch.setattr(X, "judged_rows", spy)
    runs = []
    for scale in (1.0, 3.0):
        seen.clear()
        lomo = X.leave_one_model_out(_two_models(scale))
        # per (model, pricer): the LOMO call, then the shipped-fit call
        runs.append({(r.model, r.pricer): seen[2 * i]["simulated"].to_numpy() for i, r in enumerate(lomo.itertuples())})
    assert set(runs[0]) == {(m, p) for m in ("llama-2-7b", "llama-3.1-8b") for p in ("roofline", "refined")}
    for p in ("roofline", "refined"):
        assert np.allclose(runs[0][("llama-2-7b", p)], runs[1][("llama-2-7b", p)], rtol=1e-9)
        assert not np.allclose(runs[0][("llama-3.1-8b", p)], runs[1][("llama-3.1-8b", p)], rtol=1e-3)


def test_table_pricer_validates_out_of_cell_only() -> None:
    """Pricer rows: the table's in-cell rows are 'fidelity' (every cell), its 'validation' rows are the TP=2 cell
    priced from the TP=1 table; the rooflines carry their cells' roles; no table row claims calibration."""
    from validation.components import pricers as V

    data = K.component_data(synthetic(tps=(1, 2)))
    met, ops = V.pricer_rows(data)
    tab = ops[ops["pricer"] == "table"]
    assert set(tab["role"]) == {"fidelity", "validation"}
    assert set(tab.loc[tab["role"] == "validation", "cell_id"]) == {c for c in data.tps if c.endswith("/tp2")}
    assert set(tab.loc[tab["role"] == "fidelity", "cell_id"]) == set(data.tps)
    roles = dict(zip(data.ops["cell_id"], data.ops["role"], strict=True))
    for name in ("roofline", "refined"):
        r = ops[ops["pricer"] == name]
        assert (r["role"] == r["cell_id"].map(roles)).all()
    assert set(met["role"]) <= set(P.ROLES)
