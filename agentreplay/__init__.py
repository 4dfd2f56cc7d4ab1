"""agentreplay: trace-replay simulator and validation toolkit for multi-turn LLM agent serving."""

__version__ = "0.1.0"
