"""The table pricer's all-reduce protocol: each curve's table is built from every other size and judged on the
rest, a held-out point never reaches its own prediction; calibrate ships one curve per GPU and GPU count."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentreplay.perf import load_gpu
from agentreplay.perf.table import load_refinement
from validation.calibration import calibrate as K
from validation.components import profiles as C
from validation.components.pricers import _allreduce_held_out

SIZES = [2048 * 2**k for k in range(12)]


def curve(tp: int, gpu: str = "h100-sxm") -> pd.DataFrame:
    secs = [20e-6 + b * 2 * (tp - 1) / tp / 300e9 for b in SIZES]  # monotone: a ring with a 20 us latency
    return pd.DataFrame(
        {
            "cell_id": f"vidur/network/{gpu}/all_reduce/n{tp}",
            "group": "all_reduce",
            "probe": "all_reduce",
            "tp": tp,
            "bytes": SIZES,
            "measured_s": secs,
            "gpu": gpu,
        }
    )


def test_every_other_size_builds_the_table_and_the_rest_judges_it() -> None:
    ar = pd.concat([curve(2), curve(4)], ignore_index=True)
    gpu = load_gpu("h100-sxm")
    eff, ref = load_refinement(gpu)
    pred, cal = _allreduce_held_out(ar, gpu, eff, ref)
    for tp in (2, 4):
        r = cal[(ar["tp"] == tp).to_numpy()]
        assert r.tolist() == [True, False] * (len(SIZES) // 2)
    assert pred[cal] == pytest.approx(ar["measured_s"].to_numpy()[cal], rel=1e-9)  # table points reproduced
    err = np.abs(pred / ar["measured_s"].to_numpy() - 1)
    inside = ~cal & (ar["bytes"] < max(SIZES)).to_numpy()
    assert err[inside].max() < 0.01  # between two table sizes the roofline's ring shape fits a ring curve
    assert 0.01 < err[~inside & ~cal].max() < 0.2  # the largest size is beyond the table: the roofline's slope
    # a held-out measurement never reaches its own prediction
    moved = ar.copy()
    moved.loc[~cal, "measured_s"] *= 3.0
    pred2, cal2 = _allreduce_held_out(moved, gpu, eff, ref)
    assert (cal2 == cal).all() and pred2 == pytest.approx(pred, rel=1e-12)


def test_shipped_allreduce_one_curve_per_gpu_and_count() -> None:
    full = pd.concat([curve(2), curve(4), curve(8), curve(2, gpu="unknown-gpu")], ignore_index=True)
    data = K.ComponentData(
        ops=pd.DataFrame(),
        iterations=pd.DataFrame(),
        allreduce=pd.DataFrame(),
        specs={},
        tps={},
        cells=pd.DataFrame(),
        allreduce_full=full,
    )
    got = K.shipped_allreduce(data)
    assert sorted(got) == ["h100-sxm/tp2", "h100-sxm/tp8"]  # the 4-GPU curve validates: no table of it
    assert list(got["h100-sxm/tp8"].nbytes) == SIZES
    assert got["h100-sxm/tp8"].name == "vidur/network/h100-sxm/all_reduce/n8"
    with pytest.raises(ValueError, match="comes from one cell"):
        C.allreduce_table(pd.concat([curve(2), curve(4)]))
