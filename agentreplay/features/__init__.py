"""Optional parts of the simulator and the studies built on them, one folder each (:mod:`.registry`)."""

from agentreplay.features.base import Feature, load
from agentreplay.features.registry import feature, features

__all__ = ["Feature", "feature", "features", "load"]
