"""The canonical agent trace: schema, taxonomy, validated readers and atomic writers."""

from agentreplay.trace.io import Trace, TraceError, read_trace, write_trace

__all__ = ["Trace", "TraceError", "read_trace", "write_trace"]
