"""Task-level view of a simulate output: provider cost per task with prompt-cache pricing, goodput against a
task deadline (absolute or a multiple of the uncontended JCT), TTFT by step, per-session cache health.

Post-processing only: the inputs are a ``simulate`` output folder (:mod:`.outputs`), the run's performance model
(:mod:`.uncontended`), a price config (:mod:`.cost`) and optionally the trace. ``agentreplay tasks OUT_DIR`` is the
command; :func:`analyse` / :func:`write_report` the functions behind it.

>>> from agentreplay.fleet import Prices, analyse, read_output
>>> rep = analyse(read_output("out/sim"), Prices(), deadline_x=3)  # doctest: +SKIP
"""

from agentreplay.fleet.cache_health import Collapse
from agentreplay.fleet.cost import Prices, load_prices
from agentreplay.fleet.outputs import OutputError, SimOutput, read_output
from agentreplay.fleet.report import TaskReport, analyse, write_report

__all__ = [
    "Collapse",
    "OutputError",
    "Prices",
    "SimOutput",
    "TaskReport",
    "analyse",
    "load_prices",
    "read_output",
    "write_report",
]
