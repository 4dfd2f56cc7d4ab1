"""Hardware performance model: GPU / model catalogs, the iteration pricer, and KV-cache capacity.

>>> from agentreplay.perf import PerfModel
>>> pm = PerfModel.from_names("h100-sxm", "llama-3.1-8b", dtype="bf16", tp=1)
>>> step_s = pm.decode_step_time_s(batch=64, ctx=1024)

All times are seconds unless a name says otherwise; the numbers behind them are data in ``catalog/*.toml``.
``RefinedPerfModel`` (refined roofline, ``catalog/roofline.toml``) and ``TablePerfModel`` (measured tables,
``catalog/tables.toml``) are alternative pricers with the same interface (``agentreplay.perf.table``).
"""

from agentreplay.perf.catalog import (
    DTYPE_BYTES,
    Dtype,
    Efficiency,
    GpuSpec,
    ModelSpec,
    list_gpus,
    list_models,
    load_gpu,
    load_model,
)
from agentreplay.perf.memory import (
    DEFAULT_ACTIVATION_RESERVE_GIB,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KvCapacity,
    kv_capacity,
    kv_capacity_blocks,
)
from agentreplay.perf.model import IterationPricer, PerfModel, PrefillItem
from agentreplay.perf.table import AllReduceTable, MeasuredTable, RefinedPerfModel, Refinement, TablePerfModel
from agentreplay.perf.terms import OPERATORS

__all__ = [
    "DEFAULT_ACTIVATION_RESERVE_GIB",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DTYPE_BYTES",
    "OPERATORS",
    "AllReduceTable",
    "Dtype",
    "Efficiency",
    "GpuSpec",
    "IterationPricer",
    "KvCapacity",
    "MeasuredTable",
    "ModelSpec",
    "PerfModel",
    "PrefillItem",
    "RefinedPerfModel",
    "Refinement",
    "TablePerfModel",
    "kv_capacity",
    "kv_capacity_blocks",
    "list_gpus",
    "list_models",
    "load_gpu",
    "load_model",
]
