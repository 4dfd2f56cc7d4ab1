"""The run's tables built without pandas (issue 17, item 14) are the ones pandas gave: same Arrow tables (schema
metadata included, so the same Parquet bytes) and the same summary as ``metrics.summarize`` of the DataFrames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.metrics import summarize
from agentreplay.sim.tables import group_sum, to_arrow
from tests.factories import make_trace

#: 12 programs of 1 to 6 turns with tool gaps, sharing a system prefix
TRACE = make_trace(
    [[(800 + 700 * t, 30 + 7 * p, 0.3 * (p % 3)) for t in range(1 + p % 6)] for p in range(12)],
    shared_prefix_tokens=300,
)

CONFIGS = {
    "default": {},
    "preempting": {"cache": {"num_gpu_blocks": 700}, "workload": {"concurrency": 12}},
    "two instances, poisson": {"hardware": {"instances": 2}, "workload": {"arrival": "poisson", "rate_per_s": 3.0}},
    "host tier, ttl": {"tiers": {"dram_gib": 1.0}, "policy": {"retention": "ttl"}},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tables_and_summary_match_the_pandas_path(name) -> None:
    res = simulate(TRACE, SimConfig().replace(**CONFIGS[name]))
    for table, arrow in res.tables().items():
        want = pa.Table.from_pandas(getattr(res, table), preserve_index=False)
        assert arrow.schema.equals(want.schema, check_metadata=True), table
        assert arrow.equals(want), table
    frames = summarize(res.turns, res.programs)
    assert {k: res.summary[k] for k in frames} == frames


def test_preemptions_happen_in_the_preempting_config() -> None:
    res = simulate(TRACE, SimConfig().replace(**CONFIGS["preempting"]))
    assert res.summary["preemptions"] > 0  # (so the int32 per-program sums above are exercised)


@pytest.mark.parametrize("nan_share", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_group_sum_is_pandas_groupby_sum(nan_share, dtype) -> None:
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 40, 50)
    start = np.concatenate(([0], np.cumsum(sizes)))
    x = rng.random(start[-1]) * 10.0 ** rng.integers(-6, 6, start[-1])
    if dtype is np.float64:
        x[rng.random(len(x)) < nan_share] = np.nan
    else:
        x = (x * 1000).astype(dtype)
    ids = np.repeat(np.arange(len(sizes)), sizes).astype(str)
    want = pd.DataFrame({"g": ids, "x": x}).groupby("g", sort=False)["x"].sum().to_numpy()
    got = group_sum(x, start)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


def test_to_arrow_is_from_pandas() -> None:
    cols = {
        "s": np.asarray(["a", "", "ßé"], dtype=object),
        "f": np.array([1.5, np.nan, -0.0]),
        "i": np.array([1, 2, 3], dtype=np.int32),
        "j": np.array([4, 5, 6], dtype=np.int64),
    }
    want = pa.Table.from_pandas(pd.DataFrame(cols), preserve_index=False)
    got = to_arrow(cols)
    assert got.schema.equals(want.schema, check_metadata=True)
    assert got.equals(want)


def test_pandas_version_is_read_without_importing_pandas() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom agentreplay.sim.tables import _pandas_version\nv = _pandas_version()\n"
        "assert 'pandas' not in sys.modules\nprint(v)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == pd.__version__
