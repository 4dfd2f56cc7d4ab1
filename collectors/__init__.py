"""Readers of native formats (agent trajectories, measured runs, GPU profiles) that write canonical Parquet."""

from typing import Final

#: The formats ``collect`` reads, in the registry's order, with the files each reads in the PATH it is given (a
#: file of that kind, or a folder: the request-trace formats read the folder's own files, recognised by the
#: fields of their first line or CSV header). Kept here so the CLI can list them without importing the collectors
#: (pandas, pyarrow); tests hold the names to ``collectors.registry.formats()`` and the fields to each module's.
FILES: Final[dict[str, str]] = {
    "mini-swe-agent": "*.traj.json, at any depth",
    "claude-code": "attempt_*/trace.jsonl and tool_calls.json, <= 2 folders down",
    "swe-agent": "*.traj and SWE-smith / Continuum *.json, at any depth",
    "lmcache": "*.jsonl of {timestamp, input, output, session_id}",
    "splitwise": "*.csv of arrived_at, num_prefill_tokens, num_decode_tokens",
    "azure-llm": "*.csv of TIMESTAMP, ContextTokens, GeneratedTokens",
    "mooncake": "*.jsonl of {timestamp, input_length, output_length, hash_ids}",
    "llmservingsim": "*.jsonl of {input_toks, output_toks, arrival_time_ns}",
    "dag-workflow": "*.jsonl of {workflow_id, nodes, edges}",
}
#: Names of the formats ``collect`` reads, in the registry's order (``collectors.registry.formats()``, which a test
#: holds to this tuple).
FORMATS: Final[tuple[str, ...]] = tuple(FILES)


def files_read() -> str:
    """One line per format: its name and the files it reads (:data:`FILES`)."""
    width = max(map(len, FILES))
    return "\n".join(f"{name:<{width}}  {files}" for name, files in FILES.items())
