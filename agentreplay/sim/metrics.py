"""Metrics: per-turn and per-program records, per-instance time series, and the run summary.

Definitions (DESIGN §4, used everywhere):

- JCT = finish of the program's last turn - program arrival.
- TTFT = first token - turn release (queueing, prefill and any preemption included).
- TPOT = (last token - first token) / (output tokens - 1), for turns with more than one output token.
- Throughput = completed programs (or output tokens) per second, over the run's makespan (first arrival to last
  finish).
- Prefix hit rate = prompt tokens served from the HBM prefix cache at admission / prompt tokens; split into the
  cross-program shared prefix and the program's own history.
- GPU-seconds of a turn (``gpu_s``) = its token share of every iteration it ran in x the iteration's duration x
  the instance's GPUs (:mod:`agentreplay.sim.gpu_time`); a program's is the sum over its turns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agentreplay.request import Request
from agentreplay.sim.instance import Instance
from agentreplay.sim.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

_NAN = float("nan")


class Recorder:
    """Preallocated arrays indexed by global turn / program index (no per-turn objects kept)."""

    def __init__(self, workload: Workload, interval_s: float, sink: Any = None) -> None:
        n, m = workload.n_turns, workload.n_programs
        self.w = workload
        #: streaming mode (:class:`agentreplay.sim.stream.ResultStream`): the arrays stay empty; a finished
        #: turn's row is written into the sink's row buffer (columns, through memoryviews, in compiled code: a
        #: call into the sink per turn would cost more than the row) at the next free position, which is
        #: appended to its live program's list in ``sink.live_rows``; when the buffer is full the sink makes room
        #: (:meth:`ResultStream.make_room`). Program arrivals and ends go to the sink; instance samples go into the
        #: sink's sample buffer, which it writes when full (the run then holds live programs only)
        self.sink = sink
        self._live_rows: dict[int, list[int]] = {}
        self._pos = 0  #: next free row of the sink's buffer
        self._cap = 0  #: rows of the sink's buffer
        self._last_pos = -1  #: row of the last turn recorded (its tool gap comes next)
        self._b: list[Any] = []  #: memoryviews of the sink's buffer columns, in ``stream.BUFFER`` order
        #: streaming: memoryviews of the sink's instance-sample buffer (``stream.SAMPLE_COLUMNS``), its rows, and
        #: the rows filled since the sink last wrote it (``ResultStream.write_samples``; the rest at ``close``)
        self._s: list[Any] = []
        self._s_cap = 0
        self.sample_rows = 0
        if sink is not None:
            n = m = 0
            self._live_rows = sink.live_rows
            self._buffer_views()
            self._s = [col.data for col in sink.sample_buffer]
            self._s_cap = len(sink.sample_buffer[0])
        self.turn_instance = np.full(n, -1, dtype=np.int32)
        self.turn_release_s = np.full(n, np.nan)
        self.turn_first_sched_s = np.full(n, np.nan)
        self.turn_first_token_s = np.full(n, np.nan)
        self.turn_finish_s = np.full(n, np.nan)
        self.turn_cached = np.zeros(n, dtype=np.int64)
        self.turn_cached_prefix = np.zeros(n, dtype=np.int64)
        self.turn_recomputed = np.zeros(n, dtype=np.int64)
        self.turn_preemptions = np.zeros(n, dtype=np.int32)
        self.turn_reloaded = {src: np.zeros(n, dtype=np.int64) for src in ("dram", "cxl", "remote")}
        self.turn_tool_s = np.full(n, np.nan)
        self.turn_gpu_s = np.zeros(n)
        self.program_arrival_s = np.full(m, np.nan)
        self.program_finish_s = np.full(m, np.nan)
        self.interval_s = interval_s
        self._next_sample: dict[int, float] = {}
        self.samples: list[tuple[float, int, int, int, int, int]] = []
        self._views()

    def _views(self) -> None:
        """Memoryviews of the arrays for the per-turn writes: about 3x cheaper per element than numpy scalar
        assignment, same values (the arrays stay the storage). Typed ``Any``: typeshed's ``memoryview`` takes
        only ints, while these views also hold float64."""
        self._v_instance: Any = self.turn_instance.data
        self._v_release: Any = self.turn_release_s.data
        self._v_first_sched: Any = self.turn_first_sched_s.data
        self._v_first_token: Any = self.turn_first_token_s.data
        self._v_finish: Any = self.turn_finish_s.data
        self._v_cached: Any = self.turn_cached.data
        self._v_cached_prefix: Any = self.turn_cached_prefix.data
        self._v_recomputed: Any = self.turn_recomputed.data
        self._v_preemptions: Any = self.turn_preemptions.data
        self._v_tool: Any = self.turn_tool_s.data
        self._v_gpu: Any = self.turn_gpu_s.data
        self._v_reloaded: dict[str, Any] = {src: a.data for src, a in self.turn_reloaded.items()}
        self._v_arrival: Any = self.program_arrival_s.data
        self._v_program_finish: Any = self.program_finish_s.data

    def _buffer_views(self) -> None:
        """Memoryviews of the sink's row-buffer columns (new after the sink grows its buffer)."""
        self._b = [col.data for col in self.sink.buffer]
        self._cap = len(self.sink.buffer[0])

    def record_turn(self, r: Request) -> None:
        t = r.turn
        if self.sink is not None:
            pos = self._pos
            if pos >= self._cap:
                pos = self.sink.make_room(pos)
                self._buffer_views()
            self._pos = pos + 1
            self._last_pos = pos
            self._live_rows[r.program].append(pos)
            rel = r.reloaded_tokens
            b = self._b
            b[0][pos] = t
            b[1][pos] = r.instance
            b[2][pos] = r.release_s
            b[3][pos] = r.first_sched_s
            b[4][pos] = r.first_token_s
            b[5][pos] = r.finish_s
            b[6][pos] = r.cached_tokens
            b[7][pos] = r.cached_prefix_tokens
            b[8][pos] = r.recomputed_tokens
            b[9][pos] = r.preemptions
            b[10][pos] = rel.get("dram", 0)
            b[11][pos] = rel.get("cxl", 0)
            b[12][pos] = rel.get("remote", 0)
            b[13][pos] = _NAN if r.last else r.next_gap_s  # the gap the orchestrator records next (tool_gap)
            b[14][pos] = r.gpu_s
            return
        done = self._v_finish[t]
        if done == done:  # not NaN
            raise RuntimeError(f"turn {t} of program {self.w.program_ids[r.program]!r} finished twice")
        self._v_instance[t] = r.instance
        self._v_release[t] = r.release_s
        self._v_first_sched[t] = r.first_sched_s
        self._v_first_token[t] = r.first_token_s
        self._v_finish[t] = r.finish_s
        self._v_cached[t] = r.cached_tokens
        self._v_cached_prefix[t] = r.cached_prefix_tokens
        self._v_recomputed[t] = r.recomputed_tokens
        self._v_preemptions[t] = r.preemptions
        self._v_gpu[t] = r.gpu_s
        for src, n in r.reloaded_tokens.items():
            self._v_reloaded[src][t] = n

    def program_arrived(self, p: int, now: float) -> None:
        if self.sink is not None:
            self.sink.program_arrived(p, now)
            return
        self._v_arrival[p] = now

    def program_finished(self, p: int, now: float) -> None:
        if self.sink is not None:
            self.sink.program_finished(p, now)
            return
        self._v_program_finish[p] = now

    def tool_gap(self, turn: int, seconds: float) -> None:
        if self.sink is not None:
            pos = self._last_pos
            if pos < 0 or self._b[0][pos] != turn:  # (the orchestrator records a turn's gap right after the turn)
                raise RuntimeError(f"tool gap of turn {turn} recorded before the turn")
            self._b[13][pos] = seconds
            return
        self._v_tool[turn] = seconds

    def sample(self, inst: Instance) -> float:
        """Instance time series, at most one sample per ``interval_s`` per instance; returns when this instance's
        next sample is due (the instance calls again only from then on: ``Instance.sample_due``)."""
        now = inst.engine.now
        due = self._next_sample.get(inst.index, 0.0)
        if now < due:
            return due
        due = self._next_sample[inst.index] = now + self.interval_s
        pool = inst.pool
        if self.sink is not None:  # into the sink's sample buffer (columns as stream.SAMPLE_COLUMNS)
            k = self.sample_rows
            s = self._s
            s[0][k] = now
            s[1][k] = inst.index
            s[2][k] = pool.used_blocks
            s[3][k] = pool.num_blocks
            s[4][k] = len(inst.sched.running)
            s[5][k] = len(inst.sched.waiting)
            k += 1
            if k == self._s_cap:
                self.sink.write_samples(k)
                k = 0
            self.sample_rows = k
            return due
        self.samples.append(
            (now, inst.index, pool.used_blocks, pool.num_blocks, len(inst.sched.running), len(inst.sched.waiting))
        )
        return due

    # ---- tables --------------------------------------------------------------------------------------------
    def turns_frame(self) -> pd.DataFrame:
        import pandas as pd  # here, not at module level: the simulate path never loads pandas

        w = self.w
        prog = np.repeat(np.arange(w.n_programs), np.diff(w.turn_start))
        turn_idx = np.arange(w.n_turns) - w.turn_start[prog]
        out = w.output_tokens
        ttft = self.turn_first_token_s - self.turn_release_s
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out > 1, (self.turn_finish_s - self.turn_first_token_s) / (out - 1), np.nan)
        return pd.DataFrame(
            {
                "program_id": np.asarray(w.program_ids, dtype=object)[prog],
                "turn_idx": turn_idx.astype(np.int32),
                "instance": self.turn_instance,
                "release_s": self.turn_release_s,
                "first_scheduled_s": self.turn_first_sched_s,
                "first_token_s": self.turn_first_token_s,
                "finish_s": self.turn_finish_s,
                "queued_s": self.turn_first_sched_s - self.turn_release_s,
                "ttft_s": ttft,
                "tpot_s": tpot,
                "input_tokens": w.input_tokens,
                "output_tokens": out,
                "cached_tokens": self.turn_cached,
                "cached_prefix_tokens": self.turn_cached_prefix,
                "reloaded_dram_tokens": self.turn_reloaded["dram"],
                "reloaded_cxl_tokens": self.turn_reloaded["cxl"],
                "reloaded_remote_tokens": self.turn_reloaded["remote"],
                "computed_prompt_tokens": w.input_tokens
                - self.turn_cached
                - self.turn_reloaded["dram"]
                - self.turn_reloaded["cxl"]
                - self.turn_reloaded["remote"],
                "recomputed_tokens": self.turn_recomputed,
                "preemptions": self.turn_preemptions,
                "tool_s": self.turn_tool_s,
                "gpu_s": self.turn_gpu_s,
            }
        )

    def programs_frame(self, turns: pd.DataFrame) -> pd.DataFrame:
        import pandas as pd  # here, not at module level: the simulate path never loads pandas

        w = self.w
        g = turns.groupby("program_id", sort=False)
        agg = pd.DataFrame(
            {
                "n_turns": g.size(),
                "input_tokens": g["input_tokens"].sum(),
                "output_tokens": g["output_tokens"].sum(),
                "cached_tokens": g["cached_tokens"].sum(),
                "tool_s": g["tool_s"].sum(),
                "queued_s": g["queued_s"].sum(),
                "preemptions": g["preemptions"].sum(),
                "gpu_s": g["gpu_s"].sum(),
            }
        ).reindex(w.program_ids)
        df = pd.DataFrame(
            {
                "program_id": w.program_ids,
                "task_id": w.task_ids,
                "arrival_s": self.program_arrival_s,
                "finish_s": self.program_finish_s,
                "jct_s": self.program_finish_s - self.program_arrival_s,
            }
        )
        for col in agg.columns:
            if col != "gpu_s":
                df[col] = agg[col].to_numpy()
        df["hit_rate"] = df["cached_tokens"] / df["input_tokens"]
        df["migrations"] = 0
        df["gpu_s"] = agg["gpu_s"].to_numpy()
        return df

    def instances_frame(self) -> pd.DataFrame:
        import pandas as pd  # here, not at module level: the simulate path never loads pandas

        return pd.DataFrame(
            self.samples, columns=["time_s", "instance", "kv_used_blocks", "kv_total_blocks", "running", "waiting"]
        )


def _q(x: np.ndarray) -> dict[str, float]:
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return {"mean": float("nan"), "p50": float("nan"), "p90": float("nan"), "p99": float("nan")}
    mean = float(x.mean())
    # one partition of x (a copy already) for the three quantiles, in place: the same values as three calls,
    # without three more copies of a column (40 M turns: 320 MB each)
    p50, p90, p99 = np.quantile(x, [0.5, 0.9, 0.99], overwrite_input=True).tolist()
    return {"mean": mean, "p50": p50, "p90": p90, "p99": p99}


def summarize(turns: pd.DataFrame, programs: pd.DataFrame) -> dict[str, Any]:
    """Run-level figures (definitions in the module docstring)."""
    start = float(programs["arrival_s"].min())
    end = float(programs["finish_s"].max())
    makespan = end - start
    inp = int(turns["input_tokens"].sum())
    out = int(turns["output_tokens"].sum())
    cached = int(turns["cached_tokens"].sum())
    cached_prefix = int(turns["cached_prefix_tokens"].sum())
    gpu_s = float(turns["gpu_s"].to_numpy(dtype=float).sum())
    return {
        "programs": len(programs),
        "turns": len(turns),
        "makespan_s": makespan,
        "jct_s": _q(programs["jct_s"].to_numpy(dtype=float)),
        "ttft_s": _q(turns["ttft_s"].to_numpy(dtype=float)),
        "tpot_s": _q(turns["tpot_s"].to_numpy(dtype=float)),
        "queued_s": _q(turns["queued_s"].to_numpy(dtype=float)),
        "throughput_programs_per_s": len(programs) / makespan if makespan > 0 else float("nan"),
        "throughput_output_tokens_per_s": out / makespan if makespan > 0 else float("nan"),
        "input_tokens": inp,
        "output_tokens": out,
        "prefix_hit_rate": cached / inp if inp else 0.0,
        "prefix_hit_rate_shared_prefix": cached_prefix / inp if inp else 0.0,
        "prefix_hit_rate_own_history": (cached - cached_prefix) / inp if inp else 0.0,
        "recomputed_tokens": int(turns["recomputed_tokens"].sum()),
        "reloaded_tokens": {src: int(turns[f"reloaded_{src}_tokens"].sum()) for src in ("dram", "cxl", "remote")},
        "computed_prompt_tokens": int(turns["computed_prompt_tokens"].sum()),
        "preemptions": int(turns["preemptions"].sum()),
        "gpu_s_attributed": gpu_s,
        "gpu_hours_per_1000_tasks_attributed": gpu_s / 3600.0 * 1000.0 / len(programs) if len(programs) else 0.0,
    }
