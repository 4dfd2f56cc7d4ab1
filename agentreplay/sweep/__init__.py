"""Parameter sweeps: expand a spec into cells, run them on a local pool or a Dask cluster, stream the results to
a partitioned Parquet dataset, and render a report.

>>> from agentreplay.sweep import load_spec, make_executor, run_sweep
>>> spec = load_spec("examples/sweep-small.toml")
>>> with make_executor(workers=4) as ex:
...     outcome = run_sweep(spec, "out/sweep-small", ex)
>>> from agentreplay.query import query
>>> query("select router_policy, avg(jct_mean_s) from results group by 1", "out/sweep-small")
"""

from agentreplay.sweep.executors import DaskExecutor, Executor, LocalExecutor, make_executor
from agentreplay.sweep.runner import SweepOutcome, SweepProgress, run_sweep
from agentreplay.sweep.spec import Cell, Param, SpecError, SweepSpec, load_spec, parse_spec

__all__ = [
    "Cell",
    "DaskExecutor",
    "Executor",
    "LocalExecutor",
    "Param",
    "SpecError",
    "SweepOutcome",
    "SweepProgress",
    "SweepSpec",
    "load_spec",
    "make_executor",
    "parse_spec",
    "run_sweep",
]
