"""Streaming results: per-turn and per-program rows written to Parquet as programs finish (issue 20, "a day of a
large fleet"), so a run's memory holds live programs only, not every turn of the day.

``simulate(..., stream_to=DIR)`` gives the :class:`~agentreplay.sim.metrics.Recorder` a :class:`ResultStream`
sink: the recorder then keeps no per-turn arrays; it writes each finished turn's row into the sink's row buffer
(NumPy columns, filled in turn-finish order; when full, the rows still needed move to its front) and the sink
keeps each live program's buffer positions; when the program's last turn finishes they join a pending chunk.
Every ``row_group_rows`` pending turn rows the chunk's rows are gathered from the buffer and turned into the
three tables by the same functions that build the in-memory tables (:func:`agentreplay.sim.tables.turn_columns`,
``program_columns``, ``instance_columns``, ``to_arrow``): same columns, same types, same values and definitions
(DESIGN §4), only the row order differs (programs in the order they finished, a program's turns together and in
order; instance samples in time order as in memory). Each chunk is one Parquet row group
(``pyarrow.parquet.ParquetWriter``).

Files are written as ``.NAME.parquet.partial`` and renamed to ``NAME.parquet`` only by :meth:`ResultStream.close`
after the last row group and the footer are written; :meth:`ResultStream.abort` (a failed run) deletes them, so a
partially written file never looks complete (DESIGN §8).

Tables of mechanisms that are on go to the same folder: a time series written as it grows (the KV footprint,
:meth:`ResultStream.write_rows`, row groups in time order as in memory) and small tables built once the run is
over, from the programs written (the failover ledger with each affected program's JCT, :meth:`ResultStream.add_table`
with :meth:`ResultStream.program_column`). Priority classes' summary reads the programs' JCTs the same way.

The summary (:meth:`ResultStream.summary`) is :func:`agentreplay.sim.metrics.summarize` of the written files,
read back one column at a time and put back in the in-memory row order (program index, then turn), so floating
point sums and means are the same numbers as the in-memory run's.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from agentreplay.sim import tables
from agentreplay.sim.workload import Workload

#: turn rows per row group (and per flush): about 30 MB of pending rows and 12 MB of columns per flush
ROW_GROUP_ROWS = 100_000
#: instance time-series samples buffered before they are written
SAMPLE_ROWS = 65_536

#: Parquet writer options: zstd, and no dictionary pages: most columns are floats or counts that hardly repeat
#: within a row group, where Arrow's dictionary encoder hashes every value before falling back to plain pages
#: (measured on a 5,000-program day's turns: 0.13 s and 16.3 MB a table with dictionaries, 0.07 s and 13.7 MB
#: without; the string ids compress as well under zstd)
PARQUET: dict[str, Any] = {"compression": "zstd", "use_dictionary": False}

NAMES = ("turns", "programs", "instances")
#: the turn-row buffer's columns, in the order the Recorder writes them (sim/metrics.py Recorder.record_turn,
#: streaming branch): each one's name in a chunk's recorder namespace (:meth:`ResultStream._flush`: the in-memory
#: Recorder's array of the same name and dtype; the three reload sources go to ``turn_reloaded``) and its dtype
BUFFER: tuple[tuple[str, type], ...] = (
    ("turn", np.int64),
    ("turn_instance", np.int32),
    ("turn_release_s", np.float64),
    ("turn_first_sched_s", np.float64),
    ("turn_first_token_s", np.float64),
    ("turn_finish_s", np.float64),
    ("turn_cached", np.int64),
    ("turn_cached_prefix", np.int64),
    ("turn_recomputed", np.int64),
    ("turn_preemptions", np.int32),
    ("dram", np.int64),
    ("cxl", np.int64),
    ("remote", np.int64),
    ("turn_tool_s", np.float64),
    ("turn_gpu_s", np.float64),
)
#: the instance time series' columns and dtypes (``tables.instance_columns``), in the order the Recorder writes
#: them into the sample buffer (sim/metrics.py Recorder.sample)
SAMPLE_COLUMNS: tuple[tuple[str, type], ...] = (
    ("time_s", np.float64),
    ("instance", np.int64),
    ("kv_used_blocks", np.int64),
    ("kv_total_blocks", np.int64),
    ("running", np.int64),
    ("waiting", np.int64),
)
_INSTANCE_COLUMNS = [name for name, _ in SAMPLE_COLUMNS]


class ResultStream:
    """The :class:`~agentreplay.sim.metrics.Recorder`'s sink in streaming mode (same calls as the recorder's)."""

    def __init__(self, workload: Workload, out_dir: str | os.PathLike[str], row_group_rows: int | None = None):
        row_group_rows = ROW_GROUP_ROWS if row_group_rows is None else row_group_rows
        if row_group_rows < 1:
            raise ValueError(f"stream: row_group_rows must be >= 1, got {row_group_rows}")
        self.w = workload
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.row_group_rows = row_group_rows
        #: the turn-row buffer (columns as :data:`BUFFER`), written by the Recorder at increasing positions;
        #: live program -> the buffer positions of its finished turns, in turn order
        self.buffer: list[np.ndarray] = [np.empty(2 * row_group_rows, dtype=dtype) for _, dtype in BUFFER]
        self.live_rows: dict[int, list[int]] = {}
        self._arrival: dict[int, float] = {}
        self._pending: list[int] = []  # buffer positions of the finished programs' rows not yet written
        self._programs: list[tuple[int, float, float, int]] = []  # pending (program, arrival, finish, migrations)
        #: the instance time series' buffer (columns as :data:`SAMPLE_COLUMNS`), filled by the Recorder from row 0
        #: and written when full (:meth:`write_samples`) and at :meth:`close`
        self.sample_buffer: list[np.ndarray] = [np.empty(SAMPLE_ROWS, dtype=dtype) for _, dtype in SAMPLE_COLUMNS]
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._partial = {name: self.out / f".{name}.parquet.partial" for name in NAMES}
        self.paths = {name: self.out / f"{name}.parquet" for name in NAMES}
        self._order: list[np.ndarray] = []  # finished programs, in the order written
        self.infos: list[Any] | None = None  # the orchestrator's ProgramInfo list (migrations; released on finish)
        #: the instances' :class:`~agentreplay.kv.segment_pool.SegmentPool`\ s: a finished program's history
        #: segments leave their maps (:meth:`_retire`)
        self.pools: list[Any] = []
        #: a program's history segments are in the pools of the instances it was routed to (ProgramInfo.home and
        #: affinity_breaks tell which), so a program never moved has one only at home; False when other pools
        #: also hold them (disaggregated serving's decode pools): every pool is searched
        self.home_pools = False
        #: fan-out workloads: a program's history segment is in the prefix chains of its descendants' calls (held
        #: there, unreferenced, while such a call waits to be admitted), so it is forgotten only once the program
        #: and all its descendants finished. ``_pending_desc[q]``: q's descendants not finished yet
        self._parent: list[int] | None = None
        self._pending_desc: list[int] = []
        if workload.dag is not None:
            parent = workload.dag.parent.tolist()
            pending = [0] * len(parent)
            for p in range(len(parent)):
                q = parent[p]
                while q >= 0:
                    pending[q] += 1
                    q = parent[q]
            self._parent, self._pending_desc = parent, pending
        self._retire_later: set[int] = set()  #: finished programs waiting for their descendants
        self._program_columns: dict[str, np.ndarray] = {}  #: program_column's reads, kept (read once each)
        self.rows_written = {name: 0 for name in NAMES}
        #: programs written (1) and the first program not yet written: the turns of the programs before it are
        #: never read again (:func:`release_turns`)
        self._done = bytearray(workload.n_programs)
        self._watermark = 0
        self.closed = False

    # ---- the recorder's calls (it writes each finished turn's row into the buffer itself) --------------------
    def bind(self, infos: list[Any], pools: list[Any], home_pools: bool) -> None:
        """The run's kernel, once built (:mod:`agentreplay.sim.build`): the orchestrator's ``infos``, the
        instances' pools and whether a program's history is only in its home pools (:attr:`home_pools`)."""
        self.infos, self.pools, self.home_pools = infos, pools, home_pools

    def program_arrived(self, p: int, now: float) -> None:
        self.live_rows[p] = []
        self._arrival[p] = now

    def program_finished(self, p: int, now: float) -> None:
        rows = self.live_rows.pop(p)
        arrival = self._arrival.pop(p)
        migrations, info = 0, None
        infos = self.infos
        if infos is not None:
            info = infos[p]
            migrations = 0 if info is None else info.affinity_breaks
            infos[p] = None  # the program's state is released with its rows
        self._pending.extend(rows)
        self._programs.append((p, arrival, now, migrations))
        pools = self.pools
        if self.home_pools and migrations == 0 and info is not None and info.home >= 0:
            pools = [pools[info.home]]  # never routed elsewhere: only its home holds its history segment
        parent = self._parent
        if parent is None:
            self._retire(p, pools)
        else:  # (home_pools is off for fan-out: a child's chain puts its ancestors' segments in its own pool)
            pending = self._pending_desc
            if pending[p]:
                self._retire_later.add(p)
            else:
                self._retire(p, pools)
            q = parent[p]
            while q >= 0:
                pending[q] -= 1
                if not pending[q] and q in self._retire_later:
                    self._retire_later.discard(q)
                    self._retire(q, pools)
                q = parent[q]
        if len(self._pending) >= self.row_group_rows:
            self._flush()

    def make_room(self, pos: int) -> int:
        """The Recorder has filled the buffer up to ``pos``: move the rows still needed (pending finished
        programs', then live programs', each program's in order) to its front, doubling the buffer when they
        fill more than half of it, and return the position of the next row. Rows already written are dropped."""
        if pos != len(self.buffer[0]):
            raise RuntimeError(f"stream: make_room at row {pos} of a buffer of {len(self.buffer[0])}")
        lists = [self._pending, *self.live_rows.values()]
        keep = np.fromiter((q for rows in lists for q in rows), dtype=np.int64, count=sum(map(len, lists)))
        n = len(keep)
        size = len(self.buffer[0]) * (2 if 2 * n > len(self.buffer[0]) else 1)
        for k, col in enumerate(self.buffer):
            moved = col[keep]
            if size != len(col):
                col = self.buffer[k] = np.empty(size, dtype=col.dtype)
            col[:n] = moved
        at = 0
        for rows in lists:
            rows[:] = range(at, at + len(rows))
            at += len(rows)
        return n

    @property
    def live_programs(self) -> int:
        return len(self.live_rows)

    # ---- writing -----------------------------------------------------------------------------------------
    def _write(self, name: str, table: pa.Table) -> None:
        writer = self._writers.get(name)
        if writer is None:
            self._name(name)
            writer = self._writers[name] = pq.ParquetWriter(self._partial[name], table.schema, **PARQUET)
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self.rows_written[name] += table.num_rows

    def _retire(self, p: int, pools: list[Any]) -> None:
        """Program ``p`` finished and nothing will look its history segment up again (nor, in a fan-out workload,
        any unfinished descendant whose call could name it in its prefix chain: see ``_pending_desc``): remove the
        segment from the segment maps of ``pools``. The pool keeps a segment object per (instance, program) it ever
        served, found by key when the program's next call comes (``SegmentPool.segment``); a finished program has
        no next call, so only the key goes: a segment whose blocks are still cached or held keeps them (the free
        queue's run and its holders reference the object, not the key), and forgetting it changes nothing
        simulated (the streamed tables equal the in-memory ones, tests/sim/test_stream.py; found: a child routed
        but not yet admitted held its one-turn parent's segment, and a sibling looking the parent's key up filled a
        new one), while keeping them all is about 150 bytes per (instance, program): 3 GB for a day of 1 M
        programs on 32 instances."""
        key = ("prog", p)
        for pool in pools:
            pool.segments.pop(key, None)

    def _name(self, name: str) -> None:
        """Register the output table ``name`` (its partial and final paths)."""
        if name not in self._partial:
            self._partial[name] = self.out / f".{name}.parquet.partial"
            self.paths[name] = self.out / f"{name}.parquet"
            self.rows_written[name] = 0

    def write_rows(self, name: str, cols: dict[str, np.ndarray]) -> None:
        """Append one row group to the extra table ``name`` (a mechanism's time series, e.g. ``footprint``);
        renamed to ``NAME.parquet`` by :meth:`close` with the others."""
        if name in NAMES or self.closed:
            raise RuntimeError(f"stream: cannot append rows to {name!r}" + (" after close" if self.closed else ""))
        self._write(name, tables.to_arrow(cols))

    def add_table(self, name: str, table: pa.Table) -> Path:
        """Write the whole extra table ``name`` after :meth:`close` (a small table built from the programs
        written, e.g. the failover ledger): to its partial file, then renamed, as the others."""
        if not self.closed or name in self._writers or name in NAMES:
            raise RuntimeError(f"stream: add_table({name!r}) is for a new table after close()")
        self._name(name)
        pq.write_table(table, self._partial[name], **PARQUET)
        os.chmod(self._partial[name], 0o644)
        os.replace(self._partial[name], self.paths[name])
        self.rows_written[name] = table.num_rows
        return self.paths[name]

    def program_column(self, name: str) -> np.ndarray:
        """A column of the written ``programs`` table in program-index order (the in-memory table's order), after
        :meth:`close`."""
        assert self.closed, "close() first"
        col = self._program_columns.get(name)
        if col is None:
            col = self._program_columns[name] = np.asarray(
                _FileFrame(self.paths["programs"], np.concatenate(self._order))[name]
            )
        return col

    def _flush(self) -> None:
        """Pending finished programs -> one row group of ``turns`` and one of ``programs``."""
        if not self._programs:
            return
        w = self.w
        ps = np.fromiter((q[0] for q in self._programs), dtype=np.int64, count=len(self._programs))
        n = np.diff(w.turn_start)[ps]
        start = np.zeros(len(ps) + 1, dtype=np.int64)
        np.cumsum(n, out=start[1:])
        rows = np.asarray(self._pending, dtype=np.int64)
        col = {name: buf[rows] for (name, _), buf in zip(BUFFER, self.buffer, strict=True)}
        turn = col.pop("turn")
        chunk_w = SimpleNamespace(
            n_programs=len(ps),
            n_turns=len(turn),
            turn_start=start,
            program_ids=[w.program_ids[p] for p in ps.tolist()],
            task_ids=[w.task_ids[p] for p in ps.tolist()],
            input_tokens=w.input_tokens[turn],
            output_tokens=w.output_tokens[turn],
        )
        rec = SimpleNamespace(
            w=chunk_w,
            turn_reloaded={src: col.pop(src) for src in ("dram", "cxl", "remote")},
            **col,
            program_arrival_s=np.fromiter((q[1] for q in self._programs), dtype=np.float64, count=len(ps)),
            program_finish_s=np.fromiter((q[2] for q in self._programs), dtype=np.float64, count=len(ps)),
        )
        del col
        turns = tables.turn_columns(rec)
        programs = tables.program_columns(rec, turns, [q[3] for q in self._programs])
        self._write("turns", tables.to_arrow(turns))
        del turns
        self._write("programs", tables.to_arrow(programs))
        self._order.append(ps)
        self._pending.clear()
        self._programs = []
        done = self._done
        for p in ps.tolist():
            done[p] = 1
        wm = self._watermark
        while wm < len(done) and done[wm]:
            wm += 1
        if wm > self._watermark:
            release_turns(w, int(w.turn_start[self._watermark]), int(w.turn_start[wm]))
            self._watermark = wm

    def write_samples(self, rows: int) -> None:
        """The first ``rows`` rows of the sample buffer -> one row group of ``instances`` (the Recorder fills the
        buffer again from row 0)."""
        if rows:
            buf = self.sample_buffer
            self._write(
                "instances", tables.to_arrow({name: buf[k][:rows] for k, (name, _) in enumerate(SAMPLE_COLUMNS)})
            )

    def close(self, sample_rows: int = 0) -> dict[str, Path]:
        """Write what is pending (and the Recorder's last ``sample_rows`` instance samples) and the footers, then
        rename the files to their final names."""
        if self.live_programs:
            raise RuntimeError(f"stream closed with {self.live_programs} live programs")
        self._flush()
        self.write_samples(sample_rows)
        if "instances" not in self._writers:  # no samples: the in-memory run's table (from an empty frame)
            import pandas as pd

            empty = pd.DataFrame([], columns=_INSTANCE_COLUMNS)
            self._write("instances", pa.Table.from_pandas(empty, preserve_index=False))
        for name in ("turns", "programs"):
            if name not in self._writers:
                raise RuntimeError("stream closed before any program finished")
        for writer in self._writers.values():
            writer.close()
        for name in self._writers:  # (the three tables, then the extra ones, in the order they were started)
            os.chmod(self._partial[name], 0o644)
            os.replace(self._partial[name], self.paths[name])
        self.closed = True
        return dict(self.paths)

    def abort(self) -> None:
        """A failed run: close and delete the partial files (none is left looking complete)."""
        for writer in self._writers.values():
            with contextlib.suppress(Exception):
                writer.close()
        for path in self._partial.values():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # ---- the summary ------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """:func:`agentreplay.sim.metrics.summarize` of the written tables, columns put back in the in-memory
        row order (so float sums, means and quantiles are bit for bit the in-memory run's)."""
        from agentreplay.sim.metrics import summarize

        assert self.closed, "close() first"
        order = np.concatenate(self._order)
        n = np.diff(self.w.turn_start)[order]
        out_start = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(n, out=out_start[1:])
        # turn row k of the file is global turn (turn_start[program] + k - start of that program's rows)
        shift = self.w.turn_start[:-1][order] - out_start[:-1]
        dtype = np.int32 if out_start[-1] < 2**31 else np.int64  # (40 M turns: 160 MB, not 320)
        turn_pos = np.arange(out_start[-1], dtype=dtype)
        turn_pos += np.repeat(shift, n).astype(dtype)
        return summarize(
            _FileFrame(self.paths["turns"], turn_pos),  # type: ignore[arg-type]
            _FileFrame(self.paths["programs"], order),  # type: ignore[arg-type]
        )


def release_turns(w: Workload, lo: int, hi: int) -> None:
    """Hand back to the system the memory of turns ``[lo, hi)`` of the workload's per-turn arrays that live in
    their own memory maps (:func:`agentreplay.synth_day.mapped`; others are left alone): whole pages inside the
    range, ``madvise(MADV_DONTNEED)``, after which they read as zeros. Called for the turns of programs already
    written, which nothing reads again (the orchestrator reads a turn's numbers when it releases it)."""
    import mmap

    for arr in (w.input_tokens, w.output_tokens, w.reused_tokens, w.tool_s):
        mm = arr.base.obj if isinstance(arr.base, memoryview) else arr.base  # (numpy keeps a view of the map)
        if not isinstance(mm, mmap.mmap) or not hasattr(mm, "madvise"):
            continue
        page = mmap.PAGESIZE
        start = -(-lo * arr.itemsize // page) * page
        end = hi * arr.itemsize // page * page
        if end > start:
            mm.madvise(mmap.MADV_DONTNEED, start, end - start)


class _FileFrame:
    """A Parquet file's columns on demand, one at a time, in the in-memory row order: as much of the DataFrame
    interface as :func:`~agentreplay.sim.metrics.summarize` uses (``len``, ``[name].to_numpy(dtype=...)``,
    ``.sum()``, ``.min()``, ``.max()``)."""

    def __init__(self, path: Path, pos: np.ndarray) -> None:
        self.path, self.pos = path, pos

    def __len__(self) -> int:
        return len(self.pos)

    def __getitem__(self, name: str) -> np.ndarray:
        """The column, one row group at a time into its place (a whole column read at once would hold it
        twice more: Arrow's chunks and their concatenation)."""
        f = pq.ParquetFile(self.path)
        out: np.ndarray | None = None
        at = 0
        for g in range(f.num_row_groups):
            chunk = f.read_row_group(g, columns=[name]).column(0).to_numpy()
            if out is None:
                out = np.empty(len(self.pos), dtype=chunk.dtype)
            out[self.pos[at : at + len(chunk)]] = chunk
            at += len(chunk)
        assert out is not None and at == len(self.pos), f"{self.path}: {at} rows read, {len(self.pos)} expected"
        return out.view(tables._Column)
