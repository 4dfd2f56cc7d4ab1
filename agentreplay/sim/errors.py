"""The configuration error type, apart so that configuration sections defined in their own modules (the features'
sections, e.g. :mod:`agentreplay.features.classes.config`) raise it without importing :mod:`agentreplay.sim.config`."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration value; the message names section, field, value and the allowed range."""
