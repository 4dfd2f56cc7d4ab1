"""``[footprint]``: the KV-footprint time series (what each sample holds:
:mod:`agentreplay.features.footprint.footprint`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentreplay.sim.errors import ConfigError


@dataclass(frozen=True, slots=True)
class FootprintConfig:
    """``[footprint]``: the KV-footprint time series."""

    interval_s: float = 0.0  #: minimum simulated seconds between samples of one instance; 0 = off

    def __post_init__(self) -> None:
        v = self.interval_s
        if isinstance(v, bool) or not isinstance(v, int | float) or not (v >= 0 and math.isfinite(v)):
            raise ConfigError(f"[footprint] interval_s = {v!r} is invalid: a finite number of seconds >= 0 (0 = off)")


#: the config section this feature owns (agentreplay.features.registry)
CONFIG: dict[str, type] = {"footprint": FootprintConfig}
