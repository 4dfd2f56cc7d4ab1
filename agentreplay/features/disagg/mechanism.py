"""Disaggregated prefill / decode as a mechanism (``[disagg]``, :mod:`agentreplay.features.disagg.disagg`): the
cluster is a prefill pool then a decode pool; the orchestrator routes over the prefill pool, whose finished
prefills the :class:`~agentreplay.features.disagg.disagg.Disagg` hand-off routes over the decode pool, the KV
moving over each decode instance's link."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentreplay.features.disagg.disagg import Disagg, disagg_hardware, link_gbps
from agentreplay.features.mechanism import Cluster, Finish, Hooks, Mechanism, Parts, Remote, View, Wiring
from agentreplay.kv.tiers import Link

if TYPE_CHECKING:
    from agentreplay.features.disagg.config import DisaggConfig
    from agentreplay.sim.config import HardwareConfig, SimConfig


class Disaggregation(Mechanism):
    """``[disagg] enabled`` (module docstring). :attr:`disagg`: the hand-off, once wired."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.dc: DisaggConfig = cfg.disagg
        self._disagg: Disagg | None = None

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Disaggregation | None:
        return cls(cfg) if cfg.disagg.enabled else None

    @property
    def disagg(self) -> Disagg:
        assert self._disagg is not None, "Disaggregation.wire first"
        return self._disagg

    def hardware(self, hw: HardwareConfig) -> HardwareConfig:
        return disagg_hardware(self.dc, hw)

    def wire(self, parts: Parts) -> Wiring:
        dc = self.dc
        links = [  # the KV-transfer link into each instance
            Link(f"kvxfer{i}", parts.engine, link_gbps(dc, gpu, tp), dc.link_latency_us * 1e-6)
            for i, (gpu, tp, _) in enumerate(parts.specs)
        ]
        self._disagg = Disagg(dc, parts.engine, links, parts.block_bytes, self.cfg.router, parts.deliver)
        return Wiring(
            links=tuple(links),
            finish=self._finish,
            remote=self._remote,
            routed=dc.prefill_instances,
            router=dc.prefill_router or None,
            spreads_history=True,  # (a session's history is on its decode instance too)
        )

    def _finish(self, i: int) -> Finish:
        """The prefill pool hands finished prefills over; the decode pool delivers the finished calls."""
        return self.disagg.on_prefill_done if i < self.dc.prefill_instances else self.disagg.on_decode_done

    def _remote(self, i: int) -> Remote | None:
        """A prefill instance pulls from the decode pool (or another prefill instance); a decode instance, nothing."""
        return self.disagg.remote if i < self.dc.prefill_instances else None

    def attach(self, cluster: Cluster, deps: Mapping[str, Mechanism]) -> Hooks:
        self.disagg.attach(cluster.instances)
        return Hooks(on_route=(self.disagg.prepare,), after_run=(self._check_idle,))

    def _check_idle(self) -> None:
        assert self.disagg.idle(), "disaggregated hand-offs left in flight"

    def summary(self, view: View) -> dict[str, Any]:
        return {"disagg": self.disagg.summary(view.cluster.engine.now)}


MECHANISM = Disaggregation.from_config
