"""Table-pricer limit diagnostics: ring all-reduce predictions across GPU counts on synthetic ring data, the
MAPE-optimal constant, and the decode linear-form floor."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from validation.components import diagnostics as D

SIZES = np.geomspace(4096, 64 << 20, 12)


def ring(n: int, lat_s: float = 8e-6, bus_bw: float = 150e9) -> np.ndarray:
    return (n - 1) * lat_s + D.ring_share(n) * SIZES / bus_bw


def test_ring_share_matches_nccl_bus_bandwidth() -> None:
    assert D.ring_share(2) == 1.0 and D.ring_share(4) == 1.5 and D.ring_share(8) == 1.75


@pytest.mark.parametrize("residuals", D.RESIDUALS)
def test_ring_solve_is_exact_on_ring_data(residuals: str) -> None:
    got = D.ring_solve(SIZES, ring(2), 2, ring(8), 8, 4, residuals)
    assert got == pytest.approx(ring(4), rel=1e-6)
    assert not D.ring_infeasible(SIZES, ring(2), 2, ring(8), 8).any()


def test_busbw_interp_exact_without_latency_only() -> None:
    assert D.busbw_interp(SIZES, ring(2, 0.0), 2, ring(8, 0.0), 8, 4) == pytest.approx(ring(4, 0.0), rel=1e-12)
    with_latency = D.busbw_interp(SIZES, ring(2), 2, ring(8), 8, 4)
    assert np.max(np.abs(with_latency / ring(4) - 1)) > 0.05  # latency does not follow the bus-bandwidth rule


def test_faster_with_more_gpus_has_no_ring_solution() -> None:
    t2 = ring(2)
    assert D.ring_infeasible(SIZES, t2, 2, 0.5 * t2, 8).all()  # 8 GPUs twice as fast: negative latency


def test_mape_best_constant() -> None:
    c, err = D.mape_best_constant([10.0, 10.0, 60.0])
    assert c == 10.0 and err == pytest.approx(100 * (50 / 60) / 3, rel=1e-12)
    c2, _ = D.mape_best_constant([1.0, 2.0, 3.0, 100.0])
    assert c2 in (1.0, 2.0)


def test_allreduce_limits_on_ring_data() -> None:
    rows = [(f"net/n{n}", n, int(s), float(t), "g") for n in (2, 4, 8) for s, t in zip(SIZES, ring(n), strict=True)]
    ar = pd.DataFrame(rows, columns=["cell_id", "tp", "bytes", "measured_s", "gpu"])
    priced = ar[ar["tp"] == 4].assign(simulated=lambda d: d["measured_s"] * 1.1)[["cell_id", "bytes", "simulated"]]
    table, shape = D.allreduce_limits(ar, priced)
    by = table.set_index("method")["all MAPE %"]
    assert by.filter(like="rooflines'").iloc[0] == pytest.approx(10.0, rel=1e-9)
    assert (by.filter(like="ring latency") < 1e-4).all()
    assert by.filter(like="non-decreasing").iloc[0] == pytest.approx(0.0, abs=1e-9)
    assert shape.loc[0, "next-size drops > 30%"] == 0


def test_allreduce_method_is_chosen_on_the_other_gpus() -> None:
    """The method a choice without this GPU's 4-GPU points picks: best mean MAPE on the others; floors (fitted to
    the 4-GPU points) never compete."""
    rows = [
        {"gpu": g, "method": m, "all MAPE %": v}
        for g, m, v in [
            ("a", "rooflines' ring fit", 40.0),
            ("a", "per size: ring (relative)", 28.0),
            ("a", "floor: best", 1.0),
            ("b", "rooflines' ring fit", 17.0),
            ("b", "per size: ring (relative)", 25.0),
            ("b", "floor: best", 0.5),
            ("c", "rooflines' ring fit", 19.0),
            ("c", "per size: ring (relative)", 30.0),
        ]
    ]
    a = D._chosen_elsewhere(rows, "a")
    assert "mean MAPE 18.0% there" in a and "the global ring fit the rooflines use, 40.0% here" in a
    b = D._chosen_elsewhere(rows, "b")
    # on a and c: ring fit (40 + 19) / 2 = 29.5, per size (28 + 30) / 2 = 29.0 -> per size, 25.0 on b
    assert "mean MAPE 29.0% there" in b and "'per size: ring (relative)', 25.0% here" in b
    solo = [r for r in rows if r["gpu"] == "a"]
    assert "no other GPU" in D._chosen_elsewhere(solo, "a")


def test_decode_beyond_dram_flags_only_rows_faster_than_the_datasheet() -> None:
    """1,000 B per key at 1e12 B/s is 1 ns per key per sequence: batch 1 at 0.5 ns/key (2x) is flagged, batch 2 at
    2 ns/key per sequence is not, a flat curve (no KV signal) is not; only contexts >= max / 8 enter the slope."""
    ctx = np.array([16, 1024, 2048, 4096, 8192])
    rows = []
    for b, per_key, extra in ((1, 0.5e-9, 1e-3), (2, 2e-9, 0.0), (4, 0.0, 0.0)):
        t = 1e-5 + b * per_key * ctx
        t[0] += extra  # a slow short-context point below max / 8 does not change the slope
        rows += [
            {
                "cell_id": "c",
                "gpu": "g",
                "group": "attention_decode",
                "batch_size": b,
                "context_tokens": k,
                "measured_s": v,
            }
            for k, v in zip(ctx, t, strict=True)
        ]
    out = D.decode_beyond_dram(pd.DataFrame(rows), {"c": 1000.0 / 1e12}, {"g": 1e12})
    assert out["batch size"].tolist() == [1]
    assert out.loc[0, "ratio"] == pytest.approx(2.0, rel=1e-9) and out.loc[0, "contexts"] == "1,024 - 8,192"


def test_grid_rule_cv_on_a_multiple_of_the_reference() -> None:
    """Table points = even ranks of the grid; a profile that is 2x the reference everywhere: the log-reference
    rule predicts every held-out inner row exactly, log tokens does not; the reference-scaled extrapolation is
    exact too."""

    def ref(n: float, c: float) -> float:
        return 8e-6 + 1e-12 * n * (c + n / 2)

    rows = [
        {
            "cell_id": "c",
            "gpu": "g",
            "group": "attention_prefill",
            "probe": "attn_prefill",
            "num_tokens": n,
            "batch_size": 1,
            "context_tokens": c,
            "measured_s": 2 * ref(n, c),
        }
        for n in (16, 32, 64, 128, 256, 512, 1024)
        for c in (0, 64, 512, 4096, 16384)
    ]
    out = D.grid_rule_cv(pd.DataFrame(rows), {"c": ref}).set_index(["held out", "rule"])["MAPE %"]
    assert out[("interpolate an inner token row", "log reference (in use)")] == pytest.approx(0.0, abs=1e-7)
    assert out[("interpolate an inner token row", "log tokens")] > 1.0  # the CV-chosen rule is log reference
    assert out[("extrapolate the largest token row", "reference-scaled (in use)")] == pytest.approx(0.0, abs=1e-7)
    assert ("extrapolate the largest token row", "power law in tokens") in out.index


def test_decode_linear_floor_is_zero_on_linear_data() -> None:
    b, ctx = (v.ravel() for v in np.meshgrid([1, 4, 16], [64, 512, 4096]))
    t = 5e-6 + 3e-9 * b * ctx
    full = pd.DataFrame(
        {"cell_id": "c", "group": "attention_decode", "batch_size": b, "context_tokens": ctx, "measured_s": t}
    )
    ops = full.assign(gpu="g", role="fidelity", predicted_s=t * 1.2)
    out = D.decode_linear_floor(full, ops)
    assert out.loc[0, "table pricer MAPE %"] == pytest.approx(20.0, rel=1e-9)
    assert out.loc[0, "linear form fitted to every point of each batch size, MAPE %"] == pytest.approx(0.0, abs=1e-6)
