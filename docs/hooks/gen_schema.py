"""The trace-schema reference (``reference/trace-schema.md``), generated from :mod:`agentreplay.trace.schema` and
the tool taxonomy (:mod:`agentreplay.trace.taxonomy`): the tables, every column with its Arrow type and whether it
may be null, the optional columns and the schema versions still read."""

from __future__ import annotations

from typing import Any

import gen_md as md


def _since(column: str, readable: dict[str, tuple[str, ...]]) -> str:
    """The schema version that added ``column``: one after the newest readable version that lacks it."""
    missing_in = [int(v) for v, cols in readable.items() if column in cols]
    return str(max(missing_in) + 1) if missing_in else "1"


def _table(name: str, schema: Any, s: Any) -> str:
    optional = set(s.OPTIONAL_COLUMNS.get(name, ()))
    rows = [
        [
            md.code(f.name),
            md.code(str(f.type)),
            "yes" if f.nullable else "no",
            "optional (read as null when absent)" if f.name in optional else "",
            _since(f.name, s.READABLE_VERSIONS),
        ]
        for f in schema
    ]
    required = "required" if name in s.REQUIRED_TABLES else "optional"
    return f"## `{name}` ({required})\n\n" + md.table(
        ["column", "Arrow type", "nullable", "presence", "since schema"], rows
    )


def page() -> str:
    """The whole trace-schema page."""
    from agentreplay.trace import schema as s
    from agentreplay.trace import taxonomy as t

    kinds = [
        f"- `tool_duration_kind`: {', '.join(md.code(k) for k in s.TOOL_DURATION_KINDS)}",
        f"- `tokens_kind`: {', '.join(md.code(k) for k in s.TOKENS_KINDS)}",
        f"- `tool_class`: {', '.join(md.code(k) for k in t.TOOL_CLASSES)} (taxonomy below)",
    ]
    readable = ", ".join(f"{v} (adds {', '.join(md.code(c) for c in cols)})" for v, cols in s.READABLE_VERSIONS.items())
    return "\n".join(
        [
            "# Trace schema reference\n",
            "Generated at build time from `agentreplay/trace/schema.py` (the pyarrow schemas every collector "
            "writes and the simulator reads) and `agentreplay/trace/taxonomy.py`. A trace is a folder with one "
            "Parquet file per table; the schema version and table name are stored in each file's metadata.\n",
            f"Current schema version: **{s.SCHEMA_VERSION}**. Older versions still read: {readable or 'none'}; "
            "their missing columns are read as null.\n",
            md.prose(md.module_doc(s.__name__)),
            *(_table(name, schema, s) for name, schema in s.SCHEMAS.items()),
            "## Enumerations\n",
            "\n".join(kinds) + "\n",
            "## Tool taxonomy\n",
            md.prose(md.module_doc(t.__name__)),
        ]
    )
