"""The canonical *measured* schema: what real hardware did, in tables the validation module compares against.

A measured dataset is a folder with up to five Parquet tables, all keyed by ``cell_id``:

``cells`` (required)
    One row per measured cell: a cell is (hardware, model, dtype, TP, engine, workload, load level), DESIGN §5.
    ``kind`` is ``component`` (operator / iteration profiles) or ``end-to-end`` (a serving or agent run).
    ``gpu`` is the catalog name when the GPU is in the catalog (``h100-sxm``, ``rtx3090``...), ``gpu_raw`` the
    source's own spelling. ``path`` is the source file relative to the folder it was collected from.
``component``
    Measured latencies of an operator, a layer or a whole iteration at one operating point: ``op`` names what
    was timed (e.g. ``attention``, ``mlp_up_proj``, ``layer``, ``prefill_iteration``, ``decode_iteration``,
    ``all_reduce``), ``scope`` says whether ``seconds`` covers one layer (``layer``), the whole model
    (``model``) or a standalone operator (``op``); ``num_tokens`` = new tokens processed, ``batch_size`` =
    sequences, ``context_tokens`` = KV context per sequence (0 when none), ``bytes`` for collectives.
``requests``
    Per-request records of a serving run (seconds relative to the run start): arrival, queued, scheduled, first
    and last token; tokens in and out.
``programs``
    Per-program (agent job) records: ``jct_s`` and, where known, the submission index.
``metrics``
    Aggregate figures where only those exist (LLMPerf, MLPerf, agent results): ``metric`` uses the names of
    :data:`METRIC_NAMES` with units in the name.
``peers``
    Other simulators' predictions of a measured cell, where a source publishes them (the inference-sim error
    tables): ``simulator``, ``metric`` (:data:`METRIC_NAMES`), ``predicted`` and the ``actual`` the peer was scored
    against (normally the cell's own measurement; a peer scored on a subset of the run, e.g. its first 300
    requests, has its own cell), ``origin`` the file it came from. Never a measurement: only ``actual`` is.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

MEASURED_SCHEMA_VERSION: Final = "1"

CELLS: Final = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # component | end-to-end
        pa.field("gpu", pa.string(), nullable=True),
        pa.field("gpu_raw", pa.string(), nullable=False),
        pa.field("n_gpus", pa.int32(), nullable=True),
        pa.field("model", pa.string(), nullable=False),
        pa.field("dtype", pa.string(), nullable=True),
        pa.field("tp", pa.int32(), nullable=True),
        pa.field("engine", pa.string(), nullable=True),
        pa.field("engine_version", pa.string(), nullable=True),
        pa.field("workload", pa.string(), nullable=True),
        pa.field("load", pa.string(), nullable=True),
        pa.field("config_json", pa.string(), nullable=True),  # engine / run configuration as JSON, when known
        pa.field("path", pa.string(), nullable=False),
    ]
)

COMPONENT: Final = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("scope", pa.string(), nullable=False),  # layer | model | op
        pa.field("phase", pa.string(), nullable=True),  # prefill | decode | mixed
        pa.field("num_tokens", pa.int64(), nullable=True),
        pa.field("batch_size", pa.int64(), nullable=True),
        pa.field("context_tokens", pa.int64(), nullable=True),
        pa.field("bytes", pa.int64(), nullable=True),
        pa.field("seconds", pa.float64(), nullable=False),
        pa.field("stat", pa.string(), nullable=False),  # mean | median | min | single
    ]
)

REQUESTS: Final = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("arrival_s", pa.float64(), nullable=False),
        pa.field("queued_s", pa.float64(), nullable=True),
        pa.field("scheduled_s", pa.float64(), nullable=True),
        pa.field("first_token_s", pa.float64(), nullable=True),
        pa.field("last_token_s", pa.float64(), nullable=True),
        pa.field("input_tokens", pa.int64(), nullable=False),
        pa.field("output_tokens", pa.int64(), nullable=False),
    ]
)

PROGRAMS: Final = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),
        pa.field("program_id", pa.string(), nullable=False),
        pa.field("jct_s", pa.float64(), nullable=False),
    ]
)

METRICS: Final = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)

PEERS: Final = pa.schema(
    [
        pa.field("cell_id", pa.string(), nullable=False),
        pa.field("simulator", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("predicted", pa.float64(), nullable=False),
        pa.field("actual", pa.float64(), nullable=False),
        pa.field("origin", pa.string(), nullable=True),
    ]
)

TABLES: Final[dict[str, pa.Schema]] = {
    "cells": CELLS,
    "component": COMPONENT,
    "requests": REQUESTS,
    "programs": PROGRAMS,
    "metrics": METRICS,
    "peers": PEERS,
}

#: Aggregate metric names (units in the name). Quantiles as ``_p50``, ``_p90``, ``_p95``, ``_p99``.
METRIC_NAMES: Final[tuple[str, ...]] = (
    "throughput_output_tok_s",
    "throughput_total_tok_s",
    "throughput_req_s",
    "throughput_programs_s",
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p95_s",
    "tpot_p99_s",
    "itl_mean_s",
    "itl_p50_s",
    "itl_p90_s",
    "itl_p95_s",
    "itl_p99_s",
    "e2e_mean_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p95_s",
    "e2e_p99_s",
    "jct_mean_s",
    "jct_p50_s",
    "jct_p95_s",
    "jct_p99_s",
    "jct_min_s",
    "jct_max_s",
    "makespan_s",
    "input_tokens_mean",
    "output_tokens_mean",
    "target_qps",
    "completed_requests",
    "num_programs",
    "concurrency",
)
