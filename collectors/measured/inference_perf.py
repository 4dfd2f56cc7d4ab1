"""inference-perf serving runs (the inference-sim / BLIS campaign's layout) -> end-to-end cells with peers' rows.

Accepts any folder holding any subset of the four file kinds of :mod:`collectors.measured.inference_perf_files`
(native run folders, ``*error_records*.csv`` tables, a ``trained_physics*.json`` testdata file, an
``experiment_index.csv``), or one such file. Files are merged per **run** (an experiment folder's name):

- a native folder and an error-table experiment are the same run when their names are equal, when the index
  says so (``same_run_in_training_repo``), or when their measured stage-0 mean E2E agree to 1e-6 (the tables'
  ``actual`` is the lifecycle file's value): no index is needed to join them;
- a testdata experiment id ``17`` is run ``17-...`` (or ``20260217-155451`` -> ``20260217-155451-...``) with the
  same model and TP; an ambiguous id is reported in the notes and not used;
- measured values: the native lifecycle files first, then the error tables' ``actual`` (tables by path, the
  legacy ``cluster_2000req`` table last; where two disagree the first is kept and a note says so). A table whose
  ``actual`` differs from the run's other records is a *window* of the run (the LLMServingSim "matched" table
  scores the first 300 requests only: cell ``.../first300``), never averaged with the whole stage.

**Cells**: one per run and stage (``<run>/stage0``, ``stage1``...; ``<run>/run`` for the whole run, stage -1) and
per window (``<run>/first300``). ``metrics``: ``ttft_mean_s``, ``ttft_p90_s``, ``ttft_p99_s``, ``e2e_mean_s``,
``e2e_p90_s``, ``e2e_p99_s`` (client side, seconds) and ``itl_mean_s``, the sources' per-token time
(E2E - TTFT) / (output tokens - 1) over the means, output tokens as the client counted them (inference-perf's own
TPOT / ITL count about two stream events per token and are not used). ``peers``: every other simulator's
``predicted`` for the cell with the ``actual`` it was scored against.

**Deployment and workload** in ``config_json`` with where each field came from (``sources``): vLLM limits
(max_num_seqs, max_num_batched_tokens, max_model_len), gpu_memory_utilization, KV blocks (GPU, CPU) where the
testdata or index records them, ``cpu_offload``, precision; the workload's stages (rate, duration), arrival type,
shared-prefix pool (groups x prompts, S system + Q question tokens, O output tokens) and ``workload_source``.
Fields no file records take the campaign's launch template (``campaign-config-notes.md``: max_model_len 4096,
max_num_batched_tokens 2048, max_num_seqs 128, gpu_memory_utilization 0.9) and are listed in ``assumed``.

**Replayability** (``config_json.replayable``): a run some of whose requests failed (``failures.count`` > 0), whose
achieved rate fell 5% below the requested one, or one of whose stages waited longer for the first token than it
took to decode the rest (mean TTFT > mean E2E - mean TTFT: a queue that grows through the stage) is overloaded: its
aggregates cover survivors of a queue the client did not record, so it is reported apart, with the reason, and
never averaged in (PROVENANCE caveat 4).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Final

import pandas as pd

from collectors.base import BadInput, Skip
from collectors.measured import inference_perf_files as files
from collectors.measured.common import MeasuredResult, frame, normalize_model, rel
from collectors.measured.inference_perf_cells import (  # noqa: F401  (the constants re-exported: the public names)
    PRESETS,
    RESOLVED_DEFAULT_GROUPS,
    SOURCE,
    TEMPLATE,
    make_cell,
    resolve,
    stage_key,
)
from collectors.measured.vllm_run import metric_rows

_MATCH_RTOL: Final = 1e-6
_WINDOWS: Final = {"matched": ("first300", 300)}  # error-table file-name mark -> (window, requests)
#: error tables read after the others (a disagreement keeps the value read first): PROVENANCE dates
#: ``results/cluster_2000req`` (2 Apr 2026) before the other tables; its run 57 is another, overloaded run
_LEGACY_TABLES: Final = frozenset({"cluster_2000req"})


def _is_error_table(p: Path) -> bool:
    return p.suffix == ".csv" and "error_records" in p.name


def _is_testdata(p: Path) -> bool:
    return p.suffix == ".json" and p.name.startswith("trained_physics")


def _is_index(p: Path) -> bool:
    return p.name == "experiment_index.csv"


def _is_native(p: Path) -> bool:
    return p.is_dir() and (p / "exp-config.yaml").is_file() and (p / "results").is_dir()


def _listing(root: Path) -> tuple[list[Path], list[Path], list[Path], list[Path]]:
    """(native folders, error tables, testdata files, index files) at or under ``root``."""
    if root.is_file():
        kinds = [[], [root] if _is_error_table(root) else [], [root] if _is_testdata(root) else []]
        return kinds[0], kinds[1], kinds[2], [root] if _is_index(root) else []
    native, tables, tdata, idx = [], [], [], []
    for p in sorted(root.rglob("*")):
        if p.is_dir() and _is_native(p):
            native.append(p)
        elif p.is_file():
            if _is_error_table(p):
                tables.append(p)
            elif _is_testdata(p):
                tdata.append(p)
            elif _is_index(p):
                idx.append(p)
    if _is_native(root):
        native.insert(0, root)
    return native, tables, tdata, idx


class InferencePerfCollector:
    name = "inference-perf"
    description = (
        "inference-perf serving runs: native run folders (exp-config.yaml, results/stage_*_lifecycle_metrics.json), "
        "*error_records*.csv sim-to-real tables, trained_physics*.json testdata, experiment_index.csv"
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if path.is_file():
            return _is_error_table(path) or _is_testdata(path) or _is_index(path)
        if _is_native(path):
            return True
        for i, p in enumerate(path.rglob("*")):
            if i > 5000:
                return False
            if (p.is_file() and (_is_error_table(p) or _is_testdata(p))) or (p.name == "exp-config.yaml"):
                return True
        return False

    def collect(self, path: Path) -> MeasuredResult:
        root = Path(path)
        result = MeasuredResult(fmt=self.name)
        native, tables, tdata, idx = _listing(root)
        runs = _Runs(result, root)
        for t in sorted(tables, key=lambda p: any(part in _LEGACY_TABLES for part in p.parts)):
            runs.read(t, files.error_table, runs.add_table)
        for f in native:
            runs.read(f, files.native_run, runs.add_native)
        for t in tdata:
            runs.read(t, files.testdata, runs.add_testdata)
        for t in idx:
            runs.read(t, files.index, runs.add_index)
        result.tables = runs.tables()
        if not result.count("cells") and not result.skips:
            result.notes.append(f"{root}: no inference-perf run found")
        return result


class _Runs:
    """The runs being assembled: name -> record (see the module docstring for the merge rules)."""

    def __init__(self, result: MeasuredResult, root: Path) -> None:
        self.result, self.root = result, root
        self.runs: dict[str, dict[str, Any]] = {}
        self.peers: list[dict[str, Any]] = []
        #: (run, table, table kept) -> the stage/metric pairs whose actual differs between the two tables
        self.conflicts: dict[tuple[str, str, str], list[str]] = {}

    def read(self, path: Path, reader: Any, add: Any) -> None:
        try:
            data = reader(path)
        except BadInput as exc:
            self.result.skips.append(Skip(str(path), str(exc)))
            return
        self.result.files_read += 1
        add(data, path)

    def run(self, name: str) -> dict[str, Any]:
        return self.runs.setdefault(
            name, {"name": name, "measured": {}, "sources": {}, "paths": [], "aliases": [], "windows": {}}
        )

    @staticmethod
    def _set(run: dict[str, Any], field: str, value: Any, source: str) -> None:
        """First source wins (the readers run in precedence order: native, testdata, index, tables)."""
        if value is None or (isinstance(value, float) and math.isnan(value)) or field in run["sources"]:
            return
        run[field] = value
        run["sources"][field] = source

    # ------------------------------------------------------------------ error tables
    def add_table(self, df: pd.DataFrame, path: Path) -> None:
        origin = rel(path, self.root)
        window = next((w for mark, w in _WINDOWS.items() if mark in path.name), None)
        for run_name, g in df.groupby("run", sort=False):
            run = self.run(str(run_name))
            run["paths"].append(origin)
            first = g.iloc[0]
            for field in ("tp", "max_num_batched_tokens", "gpu_mem_util", "cpu_offload", "precision", "hardware"):
                if field in g.columns:
                    self._set(run, f"table_{field}", first[field], origin)
            self._set(run, "model_raw", first["model"], origin)
            self._set(run, "label", first.get("workload"), origin)
            for (stage, metric), rows in g.groupby(["stage", "metric"]):
                actual = float(rows["actual"].iloc[0])
                key: str | int = int(stage)
                if window is not None and int(stage) == -1:
                    key = window[0]
                    run["windows"][window[0]] = window[1]
                have = run["measured"].setdefault(key, {})
                old = have.get(metric)
                if old is not None and abs(old[0] / actual - 1) > _MATCH_RTOL:
                    self.conflicts.setdefault((str(run_name), origin, old[1]), []).append(f"{stage}/{metric}")
                elif old is None:
                    have[metric] = (actual, origin)
                for _, r in rows.iterrows():
                    if pd.notna(r["predicted"]):
                        self.peers.append(
                            {
                                "run": run_name,
                                "stage": key,
                                "simulator": r["simulator"],
                                "metric": metric,
                                "predicted": float(r["predicted"]),
                                "actual": float(r["actual"]),
                                "origin": origin,
                            }
                        )

    # ------------------------------------------------------------------ native folders
    def _same_run(self, rec: dict[str, Any]) -> str | None:
        if rec["name"] in self.runs:
            return rec["name"]
        mine = rec["measured"].get(0, {}).get("metrics", {}).get("e2e_mean_s")
        if mine is None:
            return None
        for name, run in self.runs.items():
            theirs = run["measured"].get(0, {}).get("e2e_mean_s")
            if theirs is not None and abs(theirs[0] / mine - 1) <= _MATCH_RTOL:
                return name
        return None

    def add_native(self, rec: dict[str, Any], path: Path) -> None:
        origin = rel(path, self.root)
        name = self._same_run(rec) or rec["name"]
        run = self.run(name)
        if name != rec["name"]:
            run["aliases"].append(rec["name"])
        run["paths"].append(origin)
        run["native"] = True
        for field in ("model_raw", "tp", "max_model_len", "max_num_batched_tokens", "max_num_seqs"):
            run["sources"].pop(field, None)  # the launch record outranks the tables' columns
            self._set(run, field, rec[field], f"{origin}/exp-config.yaml")
        for field in ("stages", "shared_prefix", "arrivals", "workload_source", "ignore_eos"):
            run["sources"].pop(field, None)
            self._set(run, field, rec[field], origin)
        run["groups_resolved"] = rec["workload_source"].startswith("results/config.yaml")
        run["stage_info"] = {k: {x: v[x] for x in v if x != "metrics"} for k, v in rec["measured"].items()}
        for stage, st in rec["measured"].items():
            have = run["measured"].setdefault(stage, {})
            for metric, value in st["metrics"].items():
                have[metric] = (value, f"{origin}/results")  # the lifecycle files are the measurement itself

    # ------------------------------------------------------------------ testdata / index
    def _find(self, exp_id: str, model: object, tp: object) -> str | None:
        hits = [
            n
            for n, r in self.runs.items()
            if (n == exp_id or n.startswith(f"{exp_id}-") or any(a.startswith(f"{exp_id}-") for a in r["aliases"]))
            and (model is None or normalize_model(r.get("model_raw", model)) == normalize_model(model))
            and _same_tp(r.get("tp", r.get("table_tp")), tp)
        ]
        if len(hits) > 1:
            self.result.notes.append(f"testdata experiment {exp_id!r} matches runs {hits}: not used")
            return None
        return hits[0] if hits else None

    def add_testdata(self, exps: dict[str, dict[str, Any]], path: Path) -> None:
        origin = rel(path, self.root)
        for exp_id, e in exps.items():
            name = self._find(exp_id, e["model_raw"], e["tp"])
            if name is None:
                continue
            run = self.run(name)
            for field in ("max_num_seqs", "max_num_batched_tokens", "total_kv_blocks", "cpu_kv_blocks", "tp"):
                self._set(run, field, e[field], f"{origin} (experiment {exp_id})")
            self._set(run, "stages", e["stages"], f"{origin} (experiment {exp_id})")
            self._set(run, "shared_prefix", e["shared_prefix"], f"{origin} (experiment {exp_id})")
            self._set(run, "workload_source", f"{origin} experiment {exp_id} (the profile as written)", origin)

    def add_index(self, df: pd.DataFrame, path: Path) -> None:
        origin = rel(path, self.root)
        for _, row in df.iterrows():
            name = str(row["experiment"])
            alias = row.get("same_run_in_training_repo")
            if name not in self.runs and isinstance(alias, str) and alias in self.runs:
                name = alias
            if name not in self.runs:
                continue
            run = self.run(name)
            where = f"{origin} ({row['experiment']})"
            for field in ("tp", "max_num_batched_tokens", "max_num_seqs", "total_kv_blocks", "cpu_kv_blocks"):
                v = row.get(field)
                self._set(run, field, None if pd.isna(v) else int(v), where)
            for field in ("gpu_mem_util", "cpu_offload", "precision", "hardware"):
                v = row.get(field)
                self._set(run, field, None if pd.isna(v) else v, where)
            self._set(run, "label", row.get("workload_from_folder"), where)
            if "stages" not in run["sources"]:
                self._set(run, "stages", files.index_stages(row["stages"], where), where)
                s, q, o = (row.get(c) for c in ("system_prompt_len", "question_len", "output_len"))
                if not any(pd.isna(v) for v in (s, q, o)):
                    g, _, p = str(row.get("shared_prefix", "")).partition("x")
                    sp = {
                        "system_prompt_len": int(s),
                        "question_len": int(q),
                        "output_len": int(o),
                        "num_unique_system_prompts": int(g) if g.isdigit() else None,
                        "num_users_per_system_prompt": int(re.sub(r"\D.*", "", p) or 0) or None,
                    }
                    self._set(run, "shared_prefix", files.shared_prefix(sp, where), where)
                self._set(run, "workload_source", str(row.get("workload_source") or where), where)

    # ------------------------------------------------------------------ output
    def tables(self) -> dict[str, pd.DataFrame]:
        cells, metrics = [], []
        for name, run in sorted(self.runs.items()):
            try:
                base = resolve(run)
            except BadInput as exc:
                self.result.skips.append(Skip(name, str(exc)))
                continue
            for stage, vals in sorted(run["measured"].items(), key=lambda kv: str(kv[0])):
                cid = f"{SOURCE}/{name}/{stage_key(stage)}"
                m = {k: v[0] for k, v in vals.items()}
                if not m:
                    self.result.skips.append(Skip(cid, f"stage {stage}: no metric recorded"))
                    continue
                cells.append(make_cell(cid, run, base, stage, m))
                metrics.extend(metric_rows(cid, m))
        peers = [
            {
                "cell_id": f"{SOURCE}/{p['run']}/{stage_key(p['stage'])}",
                **{k: p[k] for k in ("simulator", "metric", "predicted", "actual", "origin")},
            }
            for p in self.peers
        ]
        for (run_name, origin, kept), what in self.conflicts.items():
            self.result.notes.append(
                f"{run_name}: {origin} records other measured values than {kept} for {len(what)} stage metrics "
                f"(e.g. {what[0]}): kept {kept}; that table's peer predictions of this run are not compared"
            )
        measured = {(m["cell_id"], m["metric"]): m["value"] for m in metrics}
        peers = [
            p
            for p in peers
            if (p["cell_id"], p["metric"]) in measured
            and abs(p["actual"] / measured[(p["cell_id"], p["metric"])] - 1) <= _MATCH_RTOL
        ]  # a peer scored against another measurement than the cell's is not its error on this cell
        if cells:
            n_runs = len({c["cell_id"].rsplit("/", 1)[0] for c in cells})
            bad = sum(1 for c in cells if not c["_replayable"])
            self.result.notes.append(
                f"{n_runs} inference-perf runs, {len(cells)} cells (one per stage, whole run and window); "
                f"{bad} cells of overloaded runs reported apart; {len(peers)} peer predictions"
            )
        for c in cells:
            c.pop("_replayable")
        return {"cells": frame(cells, "cells"), "metrics": frame(metrics, "metrics"), "peers": frame(peers, "peers")}


def _same_tp(have: object, want: object) -> bool:
    """A run's TP agrees with a record's when either is unknown or they are equal as integers."""
    return have is None or want is None or int(have) == int(want)  # type: ignore[call-overload]
