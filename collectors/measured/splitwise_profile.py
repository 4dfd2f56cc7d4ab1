"""Splitwise prefill / decode iteration times (Mutinifni/splitwise-sim ``data/perf_model.csv``) -> measured tables.

Native format: one CSV, one row per measurement (each operating point is repeated, typically 5 times), columns
``model, hardware, prompt_size, batch_size, token_size, peak_power, average_power, prompt_time, token_time,
e2e_time, tensor_parallel``. Per the PROVENANCE, ``prompt_time`` is the whole-batch prefill of ``batch_size``
prompts of ``prompt_size`` tokens (ms), ``token_time`` the time of one decode iteration (ms, averaged over the
request's decode), ``e2e_time`` the request's end-to-end time (ms). Hardware spellings: ``a100-80gb`` (DGX-A100),
``h100-80gb`` (DGX-H100) and ``h100-80gb-pcap`` (power-capped H100: not a catalog operating point, so its ``gpu``
is null and its cell id keeps the raw name).

Mapping: one cell per (hardware, model, ``tensor_parallel``), e.g. ``splitwise/h100-sxm/llama-2-70b/tp4``
(``model`` normalised: ``llama2-70b`` -> ``llama-2-70b``). Each CSV row gives two component rows, both
``scope = model`` and ``stat = single`` (the repeats are kept as separate rows):

- ``op = prefill_iteration``, ``phase = prefill``: ``num_tokens = prompt_size * batch_size``, ``batch_size``,
  ``context_tokens = 0``, ``seconds = prompt_time / 1000``;
- ``op = decode_iteration``, ``phase = decode``: ``num_tokens = batch_size`` (one new token per sequence),
  ``batch_size``, ``context_tokens = prompt_size`` (the context the decode starts from; the KV grows by up to
  ``token_size`` during the decode the mean is taken over), ``seconds = token_time / 1000``.

``e2e_time`` and the power columns are not ingested. A file that is unreadable, lacks a column, has a
non-numeric or missing cell or a non-positive time is skipped with the reason.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from collectors.base import BadInput, per_file
from collectors.measured.common import (
    MeasuredResult,
    cell,
    component,
    first_file,
    frame,
    head_line,
    normalize_gpu,
    normalize_model,
    numeric,
    positive_times,
    read_csv,
    rel,
    slug,
    unique_id,
    walk_files,
)

SOURCE = "splitwise"
FILE = "perf_model.csv"
REQUIRED = (
    "model",
    "hardware",
    "prompt_size",
    "batch_size",
    "token_size",
    "prompt_time",
    "token_time",
    "tensor_parallel",
)


def _ints(df: pd.DataFrame, col: str, minimum: int = 1) -> np.ndarray:
    values = numeric(df, col, integer=True).to_numpy(dtype=np.int64)
    bad = values < minimum
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadInput(f"column {col!r}: value {values[i]} below {minimum} at line {i + 2}")
    return values


def parse_perf_model(path: Path) -> list[tuple[str, str, int, pd.DataFrame]]:
    """``perf_model.csv`` -> [(hardware, model, tp, component rows without cell id)] in file order of first use."""
    df = read_csv(path, REQUIRED)
    for col in ("model", "hardware"):
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise BadInput(f"column {col!r}: missing value at line {int(np.flatnonzero(empty.to_numpy())[0]) + 2}")
    prompt, batch, tp = _ints(df, "prompt_size"), _ints(df, "batch_size"), _ints(df, "tensor_parallel")
    _ints(df, "token_size")
    prefill_s = positive_times(numeric(df, "prompt_time"), "prompt_time").to_numpy() * 1e-3
    decode_s = positive_times(numeric(df, "token_time"), "token_time").to_numpy() * 1e-3
    hw, model = df["hardware"].astype(str).str.strip().to_numpy(), df["model"].astype(str).str.strip().to_numpy()
    out = []
    keys = pd.DataFrame({"hw": hw, "model": model, "tp": tp}).drop_duplicates()
    for h, m, t in keys.itertuples(index=False):
        k = (hw == h) & (model == m) & (tp == t)
        rows = pd.concat(
            [
                component(
                    "",
                    "prefill_iteration",
                    "model",
                    prefill_s[k],
                    "single",
                    phase="prefill",
                    num_tokens=prompt[k] * batch[k],
                    batch_size=batch[k],
                    context_tokens=0,
                ),
                component(
                    "",
                    "decode_iteration",
                    "model",
                    decode_s[k],
                    "single",
                    phase="decode",
                    num_tokens=batch[k],
                    batch_size=batch[k],
                    context_tokens=prompt[k],
                ),
            ],
            ignore_index=True,
        )
        out.append((str(h), str(m), int(t), rows))
    return out


class SplitwiseProfileCollector:
    name = "splitwise-profile"
    description = "Splitwise perf_model.csv: measured prefill and decode iteration times vs batch (A100/H100)"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        f = path if path.is_file() else first_file(path, (FILE,))
        if f is None or f.name != FILE:
            return False
        head = head_line(f)
        return all(c in head for c in ("prompt_time", "token_time", "tensor_parallel"))

    def collect(self, path: Path) -> MeasuredResult:
        root = Path(path)
        result = MeasuredResult(fmt=self.name)
        cells, parts, taken = [], [], set()
        for f, groups in per_file(walk_files(root, (FILE,)), parse_perf_model, result.skips):
            result.files_read += 1
            for hw, model_raw, tp, rows in groups:
                gpu = normalize_gpu(hw)
                model = normalize_model(model_raw)
                cid = unique_id(f"{SOURCE}/{gpu or slug(hw)}/{model}/tp{tp}", taken)
                cells.append(
                    cell(
                        cid,
                        SOURCE,
                        hw,
                        model_raw,
                        rel(f, root),
                        tp=tp,
                        config={"model_raw": model_raw, "power_capped": hw.endswith("-pcap")},
                    )
                )
                parts.append(rows.assign(cell_id=cid))
        result.tables = {"cells": frame(cells, "cells"), "component": frame(parts, "component")}
        return result
