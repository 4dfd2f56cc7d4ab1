"""The KV-footprint time series as a mechanism (``[footprint] interval_s > 0``,
:mod:`agentreplay.features.footprint.footprint`): each instance's sample hook also samples who holds its blocks;
the series is the run's ``footprint`` table (a streamed run writes it as it grows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentreplay.features.footprint.footprint import FootprintSampler
from agentreplay.features.mechanism import Cluster, Hooks, Mechanism, Parts, View, Wiring

if TYPE_CHECKING:
    import numpy as np

    from agentreplay.sim.config import SimConfig


class Footprint(Mechanism):
    """The sampler (module docstring), wired into every instance's sample hook."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._sampler: FootprintSampler | None = None
        self._columns: dict[str, np.ndarray] | None = None  #: the series kept in memory (None: streamed, or empty)

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Footprint | None:
        return cls(cfg.footprint.interval_s) if cfg.footprint.interval_s > 0 else None

    @property
    def sampler(self) -> FootprintSampler:
        assert self._sampler is not None, "Footprint.wire first"
        return self._sampler

    def wire(self, parts: Parts) -> Wiring:
        self._sampler = FootprintSampler(self.interval_s, parts.block_bytes, parts.sink)
        return Wiring(sample=self.sampler.hook)

    def attach(self, cluster: Cluster, deps: Mapping[str, Mechanism]) -> Hooks:
        return Hooks(after_run=(self._finish,))

    def _finish(self) -> None:
        """The run is over: a streamed run writes the rows left (before its files are closed)."""
        self._columns = self.sampler.finish()

    def tables(self, view: View) -> dict[str, Any]:
        return {} if self._columns is None else {"footprint": self._columns}

    def summary(self, view: View) -> dict[str, Any]:
        s = self.sampler
        return {"footprint": {"interval_s": s.interval_s, "block_bytes": s.block_bytes, "samples": s.samples}}


MECHANISM = Footprint.from_config
