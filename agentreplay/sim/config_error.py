"""The configuration error, apart from :mod:`agentreplay.sim.config` so that config sections defined in their own
modules (e.g. :mod:`agentreplay.sim.speculative`) can raise it without an import cycle."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration value; the message names section, field, value and the allowed range."""
