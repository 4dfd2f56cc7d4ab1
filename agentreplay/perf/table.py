"""The measured-table pricer and the refined roofline it falls back to, behind one import.

The parts, one job each (read the module of a name for its model and invariants):

- :mod:`agentreplay.perf.kernels`: the kernel classes each operator launches;
- :mod:`agentreplay.perf.refinement`: :class:`Refinement`, the refined roofline's parameters beyond
  :class:`~agentreplay.perf.catalog.Efficiency`;
- :mod:`agentreplay.perf.refined`: :class:`RefinedPerfModel` (what each refinement fixes);
- :mod:`agentreplay.perf.measured`: :class:`MeasuredTable` and :class:`AllReduceTable`, measured profiles as data;
- :mod:`agentreplay.perf.loaders`: the TOML loaders of ``roofline.toml`` and ``tables.toml`` (and
  :class:`TableOrigin`: where a table was measured, a deployment profile or not);
- :mod:`agentreplay.perf.table_index`: what a ``tables.toml`` holds without its points (its index,
  ``tables_index.json``), what ``auto`` reads;
- :mod:`agentreplay.perf.table_model`: :class:`TablePerfModel`, pricing from a measured table (how it
  interpolates, extrapolates and scales);
- :mod:`agentreplay.perf.registry`: :func:`pricer_from_names`, the pricer of a deployment by kind, and
  :func:`choose_pricer`, what ``auto`` runs (the table of a deployment profile of exactly the deployment, else the
  roofline) and why; :mod:`agentreplay.perf.auto`: that choice for a command-line run's cluster.
"""

from agentreplay.perf.kernels import EMITTING, GEMM_OPS, KERNELS, PER_FORWARD
from agentreplay.perf.loaders import (
    TableOrigin,
    calibration_path,
    load_allreduce_tables,
    load_refinement,
    load_table_origins,
    load_tables,
    refinement_path,
    tables_path,
)
from agentreplay.perf.measured import AllReduceTable, MeasuredTable, allreduce_key, table_key
from agentreplay.perf.refined import RefinedPerfModel, kernels_s, launch_s
from agentreplay.perf.refinement import EFFICIENCY_FIELDS, REFINEMENT_FIELDS, Refinement
from agentreplay.perf.registry import (
    AUTO,
    BUILDERS,
    PERF_CHOICES,
    PRICER_KINDS,
    PricerChoice,
    PricerRequest,
    choose_pricer,
    pricer_from_names,
)
from agentreplay.perf.table_model import (
    ATTENTION_ROWS_IN_REFERENCE,
    GEMM_TILE_TOKENS,
    TablePerfModel,
    dram_key_s,
)

__all__ = [
    "ATTENTION_ROWS_IN_REFERENCE",
    "AUTO",
    "BUILDERS",
    "EFFICIENCY_FIELDS",
    "EMITTING",
    "GEMM_OPS",
    "GEMM_TILE_TOKENS",
    "KERNELS",
    "PERF_CHOICES",
    "PER_FORWARD",
    "PRICER_KINDS",
    "REFINEMENT_FIELDS",
    "AllReduceTable",
    "MeasuredTable",
    "PricerChoice",
    "PricerRequest",
    "RefinedPerfModel",
    "Refinement",
    "TableOrigin",
    "TablePerfModel",
    "allreduce_key",
    "calibration_path",
    "choose_pricer",
    "dram_key_s",
    "kernels_s",
    "launch_s",
    "load_allreduce_tables",
    "load_refinement",
    "load_table_origins",
    "load_tables",
    "pricer_from_names",
    "refinement_path",
    "table_key",
    "tables_path",
]
