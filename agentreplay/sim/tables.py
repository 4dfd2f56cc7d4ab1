"""The run's output tables as NumPy columns and Arrow tables, built without pandas (importing pandas is most of a
small ``simulate``'s start-up).

The columns are those of :meth:`agentreplay.sim.metrics.Recorder.turns_frame`, ``programs_frame`` and
``instances_frame`` (which :class:`agentreplay.sim.result.SimResult` still uses for its DataFrames), value for
value and type for type, and the Arrow tables are those ``pyarrow.Table.from_pandas(frame,
preserve_index=False)`` gives for those frames, schema metadata included, so the Parquet files are the same
bytes. ``tests/sim/test_tables.py`` holds both to that. The Arrow arrays are built from buffers:
``pyarrow.array`` imports pandas on its first call.
"""

from __future__ import annotations

import json
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

Columns = dict[str, np.ndarray]


def turn_columns(rec: Any) -> Columns:
    """:meth:`Recorder.turns_frame`'s columns (same definitions: DESIGN §4, :mod:`agentreplay.sim.metrics`)."""
    w = rec.w
    prog = np.repeat(np.arange(w.n_programs), np.diff(w.turn_start))
    turn_idx = np.arange(w.n_turns) - w.turn_start[prog]
    out = w.output_tokens
    ttft = rec.turn_first_token_s - rec.turn_release_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (rec.turn_finish_s - rec.turn_first_token_s) / (out - 1), np.nan)
    reloaded = rec.turn_reloaded
    return {
        "program_id": np.asarray(w.program_ids, dtype=object)[prog],
        "turn_idx": turn_idx.astype(np.int32),
        "instance": rec.turn_instance,
        "release_s": rec.turn_release_s,
        "first_scheduled_s": rec.turn_first_sched_s,
        "first_token_s": rec.turn_first_token_s,
        "finish_s": rec.turn_finish_s,
        "queued_s": rec.turn_first_sched_s - rec.turn_release_s,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "input_tokens": w.input_tokens,
        "output_tokens": out,
        "cached_tokens": rec.turn_cached,
        "cached_prefix_tokens": rec.turn_cached_prefix,
        "reloaded_dram_tokens": reloaded["dram"],
        "reloaded_cxl_tokens": reloaded["cxl"],
        "reloaded_remote_tokens": reloaded["remote"],
        "computed_prompt_tokens": w.input_tokens
        - rec.turn_cached
        - reloaded["dram"]
        - reloaded["cxl"]
        - reloaded["remote"],
        "recomputed_tokens": rec.turn_recomputed,
        "preemptions": rec.turn_preemptions,
        "tool_s": rec.turn_tool_s,
        "gpu_s": rec.turn_gpu_s,
    }


def group_sum(x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per-group sums of ``x`` (groups are ``x[start[g]:start[g + 1]]``, none empty) as pandas' ``groupby().sum()``
    computes them for groups in row order: integers in int64, given back in their own type; floats without any
    NaN by ``numpy.add.reduceat`` (``pandas/core/groupby/ops.py::_reduceat_aggregate``, pandas 3), floats with a
    NaN in row order with Kahan compensation, NaN skipped, 0.0 for a group of NaN only
    (``pandas/_libs/groupby.pyx::group_sum``, where a NaN compensation, from inf - inf, is reset to 0)."""
    if x.dtype.kind in "iub":
        return np.add.reduceat(x.astype(np.int64), start[:-1]).astype(x.dtype)
    if not np.isnan(x).any():
        return np.add.reduceat(x, start[:-1])
    counts = np.diff(start)
    total, comp = np.zeros(len(counts)), np.zeros(len(counts))
    for k in range(int(counts.max()) if len(counts) else 0):
        live = np.flatnonzero(counts > k)
        v = x[start[live] + k]
        ok = ~np.isnan(v)
        g, v = live[ok], v[ok]
        y = v - comp[g]
        t = total[g] + y
        c = t - total[g] - y
        c[c != c] = 0.0
        comp[g], total[g] = c, t
    return total


def program_columns(rec: Any, turns: Columns, migrations: list[int]) -> Columns:
    """:meth:`Recorder.programs_frame`'s columns, with ``migrations`` per program as :func:`simulate` sets it."""
    w = rec.w
    start = np.asarray(w.turn_start, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        cols: Columns = {
            "program_id": np.asarray(w.program_ids, dtype=object),
            "task_id": np.asarray(w.task_ids, dtype=object),
            "arrival_s": rec.program_arrival_s,
            "finish_s": rec.program_finish_s,
            "jct_s": rec.program_finish_s - rec.program_arrival_s,
            "n_turns": np.diff(start),
            **{
                c: group_sum(turns[c], start)
                for c in ("input_tokens", "output_tokens", "cached_tokens", "tool_s", "queued_s", "preemptions")
            },
        }
        cols["hit_rate"] = cols["cached_tokens"] / cols["input_tokens"]
    cols["migrations"] = np.asarray(migrations, dtype=np.int64)
    cols["gpu_s"] = group_sum(turns["gpu_s"], start)
    return cols


def instance_columns(rec: Any) -> Columns | None:
    """:meth:`Recorder.instances_frame`'s columns; None without samples (pandas gives that frame object
    columns: :class:`~agentreplay.sim.result.SimResult` then takes the pandas path)."""
    if not rec.samples:
        return None
    names = ("time_s", "instance", "kv_used_blocks", "kv_total_blocks", "running", "waiting")
    n = len(rec.samples)
    # one float64 pass over the tuples (the counts are exact below 2**53), about 2x faster than per-column lists
    a = np.fromiter(chain.from_iterable(rec.samples), dtype=np.float64, count=n * len(names)).reshape(n, len(names))
    return {
        name: np.ascontiguousarray(a[:, k]) if name == "time_s" else a[:, k].astype(np.int64)
        for k, name in enumerate(names)
    }


class FrameView(dict[str, np.ndarray]):
    """Columns that answer as much of the DataFrame interface as :func:`agentreplay.sim.metrics.summarize`
    uses (``len``: rows; ``[name].to_numpy(dtype=...)``), so the one compiled definition of the summary serves."""

    def __init__(self, columns: Columns) -> None:
        super().__init__({k: np.asarray(v).view(_Column) for k, v in columns.items()})
        self.rows = len(next(iter(columns.values()))) if columns else 0

    def __len__(self) -> int:
        return self.rows


class _Column(np.ndarray):
    def to_numpy(self, dtype: Any = None) -> np.ndarray:
        return np.asarray(self.view(np.ndarray), dtype=dtype)


# ---- Arrow ---------------------------------------------------------------------------------------------------
#: NumPy dtype -> (Arrow type, pandas_type, numpy_type of the pandas metadata pyarrow writes)
_TYPES = {
    np.dtype(np.float64): (pa.float64(), "float64", "float64"),
    np.dtype(np.int64): (pa.int64(), "int64", "int64"),
    np.dtype(np.int32): (pa.int32(), "int32", "int32"),
}


def _array(x: np.ndarray) -> tuple[pa.Array, str, str]:
    if x.dtype == object:  # strings, as a pandas 3 ``str`` column converts
        data = [v.encode() for v in x.tolist()]
        offsets = np.zeros(len(data) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in data], out=offsets[1:])
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
        return pa.Array.from_buffers(pa.large_string(), len(data), buffers), "object", "str"
    typ, pandas_type, numpy_type = _TYPES[x.dtype]
    x = np.ascontiguousarray(x)
    valid = None
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        if nan.any():  # from_pandas: NaN is null
            valid = pa.py_buffer(np.packbits(~nan, bitorder="little"))
    return pa.Array.from_buffers(typ, len(x), [valid, pa.py_buffer(x)]), pandas_type, numpy_type


def to_arrow(columns: Columns) -> pa.Table:
    """``pyarrow.Table.from_pandas(pandas.DataFrame(columns), preserve_index=False)``, without pandas."""
    arrays, meta = [], []
    for name, x in columns.items():
        arr, pandas_type, numpy_type = _array(np.asarray(x))
        arrays.append(arr)
        meta.append(
            {"name": name, "field_name": name, "pandas_type": pandas_type, "numpy_type": numpy_type, "metadata": None}
        )
    pandas_meta = {
        "index_columns": [],
        "column_indexes": [],
        "columns": meta,
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": _pandas_version(),
    }
    schema = pa.schema(
        [pa.field(n, a.type) for n, a in zip(columns, arrays, strict=True)],
        metadata={b"pandas": json.dumps(pandas_meta).encode()},
    )
    return pa.Table.from_arrays(arrays, schema=schema)


def _pandas_version() -> str:
    """``pandas.__version__`` without importing pandas: the loaded module's, else the ``__version__ = "..."`` line
    of the installed ``pandas/_version_meson.py`` (where pandas reads it from), else the distribution's metadata
    (``tests/sim/test_tables.py`` compares the result with pandas' own)."""
    import re
    import sys
    from importlib.util import find_spec

    if "pandas.core" in sys.modules:
        return str(sys.modules["pandas"].__version__)
    spec = find_spec("pandas")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(folder) / "_version_meson.py").read_text()
        except OSError:
            continue
        m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
        if m:
            return m.group(1)
    from importlib import metadata  # here, where it is read: it imports the email package

    return metadata.version("pandas")
