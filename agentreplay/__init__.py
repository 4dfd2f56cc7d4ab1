"""agentreplay: trace-replay simulator and validation toolkit for multi-turn LLM agent serving."""

from agentreplay import _native

__version__ = "0.1.0"

_native.activate()
