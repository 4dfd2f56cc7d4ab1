"""Replica failures and drains as a mechanism (``[failures]``, :mod:`agentreplay.features.failover.failover`).

Needs ``dp`` (a lockstep DP deployment fails and recovers as a whole) and ``disagg`` (calls are routed over the
prefill pool; a decode instance's failure fails its calls whole): both received in :meth:`Failure.attach` when
on. The orchestrator asks the controller where a call goes before routing it (held while no instance is up) and
tells it every finished call; its ledger is the ``failover`` table, with each affected program's JCT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentreplay.features.disagg.mechanism import Disaggregation
from agentreplay.features.dp.mechanism import Lockstep
from agentreplay.features.failover.failover import Failover
from agentreplay.features.mechanism import Cluster, Hooks, Mechanism, View

if TYPE_CHECKING:
    import pyarrow as pa

    from agentreplay.sim.config import SimConfig


class Failure(Mechanism):
    """The failover controller (module docstring), built against the kernel in :meth:`attach`."""

    needs = ("disagg", "dp")

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self._failover: Failover | None = None

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Failure | None:
        return cls(cfg) if cfg.failures.enabled else None

    @property
    def failover(self) -> Failover:
        assert self._failover is not None, "Failure.attach first"
        return self._failover

    def attach(self, cluster: Cluster, deps: Mapping[str, Mechanism]) -> Hooks:
        dp, disagg = deps.get("dp"), deps.get("disagg")
        fo = self._failover = Failover(
            self.cfg.failures,
            cluster.engine,
            cluster.orch,
            cluster.instances,
            self.cfg.seed,
            group=dp.group if isinstance(dp, Lockstep) else None,
            disagg=disagg.disagg if isinstance(disagg, Disaggregation) else None,
            sink=cluster.sink,  # (a failed instance's fresh pool replaces the old one in the sink's pools)
        )
        return Hooks(place=(fo.place,), on_turn_done=(fo.on_turn_done,), before_run=(fo.start,))

    def tables(self, view: View) -> dict[str, pa.Table]:
        return {"failover": self.failover.table(view.program_column("arrival_s"), view.program_column("finish_s"))}

    def summary(self, view: View) -> dict[str, Any]:
        return {"failover": self.failover.summary()}


MECHANISM = Failure.from_config
