"""The results dataset: ``OUT/results/cell_group=<group>/<cell_id>.parquet``, one row per finished cell.

Each row is written to a temporary file in its partition folder and renamed into place, so a reader (``agentreplay
query ... --data OUT`` sees the view ``results``) never sees a half-written file, a crash loses at most the
cells in flight, and a rerun that finishes a cell again replaces its row. Only the runner's process writes.

Schema: identity columns, one column per swept parameter (its type fixed by the spec), the core summary figures
(typed; null for a failed cell), then any other numeric summary key as float64. DuckDB reads a folder with the
first file's schema, so :meth:`ResultStore.normalize` rewrites older files when a later cell brought a new key.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from agentreplay.sweep.spec import Param

PARTITION = "cell_group"
IDENTITY = [
    ("cell_id", pa.string()),
    ("label", pa.string()),
    ("seed", pa.int64()),
    ("status", pa.string()),
    ("error", pa.string()),
    ("attempts", pa.int64()),
    ("wall_s", pa.float64()),
]
_I, _F = pa.int64(), pa.float64()
#: what ``simulate().summary`` holds today, flattened (agentreplay.sweep.worker.flatten_summary)
CORE_FIGURES = [
    ("programs", _I),
    ("turns", _I),
    ("makespan_s", _F),
    *((f"{m}_{q}_s", _F) for m in ("jct", "ttft", "tpot", "queued") for q in ("mean", "p50", "p90", "p99")),
    ("throughput_programs_per_s", _F),
    ("throughput_output_tokens_per_s", _F),
    ("input_tokens", _I),
    ("output_tokens", _I),
    ("prefix_hit_rate", _F),
    ("prefix_hit_rate_shared_prefix", _F),
    ("prefix_hit_rate_own_history", _F),
    ("recomputed_tokens", _I),
    ("preemptions", _I),
    ("cluster_instances", _I),
    ("cluster_tp", _I),
    ("cluster_num_gpu_blocks", _I),
    ("cluster_max_num_seqs", _I),
    ("cluster_max_num_batched_tokens", _I),
    ("engine_events", _I),
    ("engine_iterations", _I),
    ("engine_decode_runs", _I),
]
KIND_TYPES = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string(), "list": pa.string()}


class ResultStore:
    """Reads what an output folder already holds and appends one file per finished cell."""

    def __init__(self, root: str | Path, params: Sequence[Param]) -> None:
        self.root = Path(root)
        self._head = [*IDENTITY, *((p.column, KIND_TYPES[p.kind]) for p in params), *CORE_FIGURES]
        self._known = {name for name, _ in self._head}
        self.extras: set[str] = set()  #: summary columns beyond CORE_FIGURES seen in this folder
        self.status: dict[str, str] = {}  #: cell_id -> status of the row on disk
        for f in self.files():
            pf = pq.ParquetFile(f)
            self.extras.update(n for n in pf.schema_arrow.names if n not in self._known)
            t = pf.read(columns=["cell_id", "status"])
            for cid, st in zip(t["cell_id"].to_pylist(), t["status"].to_pylist(), strict=True):
                self.status[cid] = st

    def files(self) -> list[Path]:
        return sorted(self.root.glob(f"{PARTITION}=*/*.parquet"))

    def ok_ids(self) -> set[str]:
        return {cid for cid, st in self.status.items() if st == "ok"}

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([*self._head, *((name, pa.float64()) for name in sorted(self.extras))])

    def write(self, row: dict[str, Any], group: str) -> Path:
        """Write one row (identity, parameter and figure columns by name) as ``<group>/<cell_id>.parquet``."""
        self.extras.update(k for k in row if k not in self._known)
        row = {k: float(v) if k in self.extras and v is not None else v for k, v in row.items()}
        table = pa.Table.from_pylist([row], schema=self.schema)
        path = self.root / f"{PARTITION}={group}" / f"{row['cell_id']}.parquet"
        _write_atomic(table, path)
        self.status[row["cell_id"]] = row["status"]
        return path

    def normalize(self) -> int:
        """Rewrite the files whose schema is not the folder's current one (nulls for the missing columns);
        returns how many were rewritten."""
        schema, n = self.schema, 0
        for f in self.files():
            if pq.read_schema(f).remove_metadata() == schema:
                continue
            t = pq.read_table(f, partitioning=None)
            cols = [
                t[name].cast(typ) if name in t.column_names else pa.nulls(t.num_rows, typ)
                for name, typ in zip(schema.names, schema.types, strict=True)
            ]
            _write_atomic(pa.Table.from_arrays(cols, schema=schema), f)
            n += 1
        return n


def _write_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are ordinary shareable files
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
