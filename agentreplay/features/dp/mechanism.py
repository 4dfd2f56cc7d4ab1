"""A MoE deployment's DP ranks stepping in lockstep, as a mechanism (:mod:`agentreplay.features.dp.lockstep`).

On when ``[hardware] dp > 1`` serves a MoE model (:func:`agentreplay.perf.parallel.lockstep`); a dense model's DP
ranks are independent instances and need nothing. The group steps every rank together, each step priced as the
slowest rank plus the MoE dispatch / combine (:class:`agentreplay.perf.parallel.DPStepPricer`); its counters are
the summary's ``dp_group``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentreplay.features.dp.lockstep import LockstepGroup
from agentreplay.features.mechanism import Cluster, Hooks, Mechanism, View
from agentreplay.perf import load_gpu, load_model
from agentreplay.perf.parallel import DPStepPricer, EPComm, lockstep

if TYPE_CHECKING:
    from agentreplay.sim.config import SimConfig


class Lockstep(Mechanism):
    """The lockstep group over every instance (the deployment's DP ranks). :attr:`group`: once attached."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self._group: LockstepGroup | None = None

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Lockstep | None:
        hw = cfg.hardware
        if hw.dp == 1:
            return None
        try:
            model = load_model(hw.model)
        except ValueError:
            return None  # (the deployment check names the unknown model: agentreplay.sim.run.resolve)
        return cls(cfg) if lockstep(model, hw.dp) else None

    @property
    def group(self) -> LockstepGroup:
        assert self._group is not None, "Lockstep.attach first"
        return self._group

    def attach(self, cluster: Cluster, deps: Mapping[str, Mechanism]) -> Hooks:
        hw, (gpu, tp, _) = cluster.hardware, cluster.specs[0]
        comm = EPComm.build(load_gpu(gpu), load_model(hw.model), hw.dp, tp, hw.all2all_backend)
        pricer = DPStepPricer(cluster.pricers[cluster.specs[0]], comm, decode_tokens=cluster.decode_tokens)
        self._group = LockstepGroup(cluster.engine, cluster.instances, pricer)
        return Hooks()

    def summary(self, view: View) -> dict[str, Any]:
        return {"dp_group": dataclasses.asdict(self.group.stats)}


MECHANISM = Lockstep.from_config
