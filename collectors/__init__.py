"""Readers of native formats (agent trajectories, measured runs, GPU profiles) that write canonical Parquet."""

from typing import Final

#: Names of the formats ``collect`` reads, in the registry's order (``collectors.registry.formats()``, which a test
#: holds to this tuple). Kept here so the CLI can list them without importing the collectors (pandas, pyarrow).
FORMATS: Final[tuple[str, ...]] = (
    "mini-swe-agent",
    "claude-code",
    "swe-agent",
    "lmcache",
    "splitwise",
    "azure-llm",
    "mooncake",
    "llmservingsim",
    "dag-workflow",
)
