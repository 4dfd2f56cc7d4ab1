"""Canonical agent trace: the pyarrow schemas every collector writes and the simulator reads.

Three tables (DESIGN §3), one Parquet file each in a trace directory:

``programs``
    One row per agent task (a *program*). ``shared_prefix_id`` / ``shared_prefix_tokens`` describe the
    cross-program shared prefix (the agent's system prompt): programs with the same id share that many
    leading tokens of every prompt.
``turns``
    One row per LLM call. ``turn_idx`` is contiguous from 0 per program. ``reused_tokens`` is the length of
    the prefix this turn's prompt shares with the previous turn's full context (0 for turn 0, whose only
    reuse is the shared prefix). ``tool_*`` describe the tool call that *follows* this LLM call; the last
    turn's ``tool_duration_s`` is null (the program ends when its last LLM call finishes).
``tool_calls`` (optional)
    One row per individually timed tool call. Sources with exact start/end times per call (Claude Code,
    SWE-smith) write them here even when the calls cannot be tied to a turn with token counts (e.g. a
    Claude Code task whose ``trace.jsonl`` is missing): such calls have ``turn_idx`` null. This table
    feeds tool-latency fitting; the simulator reads only ``programs`` and ``turns``.

Schema version 2 adds two nullable ``turns`` columns for traces that name their prompt blocks (Mooncake
``hash_ids``): ``prefix_hash_ids`` (the chained id of each ``hash_block_tokens``-token block of the prompt, in
order; two prompts whose lists start with the same k ids share their first ``k * hash_block_tokens`` tokens) and
``hash_block_tokens``. Null for every other source; version-1 files are read with both columns null.

Schema version 3 adds three nullable ``programs`` columns for fan-out workflows (an orchestrator turn spawning
sub-agent programs, :mod:`agentreplay.sim.dag`): ``parent_program_id`` (the program whose turn spawned this one),
``parent_turn_idx`` (that turn: the child arrives when it finishes, plus ``spawn_delay_s``, and the parent's next
turn waits for all its children: join) and ``spawn_delay_s``. Null for a root program; version-1 and -2 files are
read with the three columns null.

Units are in the names: ``_s`` seconds, ``_tokens`` tokens. Timestamps (``t_*_s``, ``arrival_s``) are
seconds relative to the first event of the program's source run, never wall-clock epochs.
"""

from __future__ import annotations

from typing import Final, Literal

import pyarrow as pa

#: Bumped whenever a column is added, removed or changes meaning. Stored in the Parquet metadata.
SCHEMA_VERSION: Final[str] = "3"
#: the optional (nullable, may be absent) columns of each table, read as all null when absent
HASH_COLUMNS: Final[tuple[str, ...]] = ("prefix_hash_ids", "hash_block_tokens")
DAG_COLUMNS: Final[tuple[str, ...]] = ("parent_program_id", "parent_turn_idx", "spawn_delay_s")
OPTIONAL_COLUMNS: Final[dict[str, tuple[str, ...]]] = {"turns": HASH_COLUMNS, "programs": DAG_COLUMNS, "tool_calls": ()}
#: Older versions this agentreplay still reads, with the columns added since (filled with nulls on read).
READABLE_VERSIONS: Final[dict[str, tuple[str, ...]]] = {"1": HASH_COLUMNS + DAG_COLUMNS, "2": DAG_COLUMNS}
SCHEMA_VERSION_KEY: Final[bytes] = b"agentreplay.schema_version"
TABLE_KEY: Final[bytes] = b"agentreplay.table"

ToolDurationKind = Literal["measured", "estimated", "sampled"]
TOOL_DURATION_KINDS: Final[tuple[str, ...]] = ("measured", "estimated", "sampled")
TokensKind = Literal["exact", "estimated"]
TOKENS_KINDS: Final[tuple[str, ...]] = ("exact", "estimated")

PROGRAMS: Final = pa.schema(
    [
        pa.field("program_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("agent", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("n_turns", pa.int32(), nullable=False),
        pa.field("resolved", pa.bool_(), nullable=True),
        pa.field("arrival_s", pa.float64(), nullable=True),
        pa.field("shared_prefix_id", pa.string(), nullable=True),
        pa.field("shared_prefix_tokens", pa.int64(), nullable=False),
        pa.field("parent_program_id", pa.string(), nullable=True),
        pa.field("parent_turn_idx", pa.int32(), nullable=True),
        pa.field("spawn_delay_s", pa.float64(), nullable=True),
    ]
)

TURNS: Final = pa.schema(
    [
        pa.field("program_id", pa.string(), nullable=False),
        pa.field("turn_idx", pa.int32(), nullable=False),
        pa.field("input_tokens", pa.int64(), nullable=False),
        pa.field("output_tokens", pa.int64(), nullable=False),
        pa.field("reused_tokens", pa.int64(), nullable=False),
        pa.field("provider_cached_tokens", pa.int64(), nullable=True),
        pa.field("reasoning_tokens", pa.int64(), nullable=True),
        pa.field("tokens_kind", pa.string(), nullable=False),
        pa.field("tool_class", pa.string(), nullable=False),
        pa.field("tool_name", pa.string(), nullable=True),
        pa.field("tool_duration_s", pa.float64(), nullable=True),
        pa.field("tool_duration_kind", pa.string(), nullable=True),
        pa.field("llm_latency_s", pa.float64(), nullable=True),
        pa.field("t_request_s", pa.float64(), nullable=True),
        pa.field("t_response_s", pa.float64(), nullable=True),
        pa.field("prefix_hash_ids", pa.list_(pa.int64()), nullable=True),
        pa.field("hash_block_tokens", pa.int32(), nullable=True),
    ]
)

TOOL_CALLS: Final = pa.schema(
    [
        pa.field("program_id", pa.string(), nullable=False),
        pa.field("call_idx", pa.int32(), nullable=False),
        pa.field("turn_idx", pa.int32(), nullable=True),
        pa.field("tool_name", pa.string(), nullable=False),
        pa.field("tool_class", pa.string(), nullable=False),
        pa.field("start_s", pa.float64(), nullable=True),
        pa.field("duration_s", pa.float64(), nullable=False),
        pa.field("duration_kind", pa.string(), nullable=False),
    ]
)

SCHEMAS: Final[dict[str, pa.Schema]] = {"programs": PROGRAMS, "turns": TURNS, "tool_calls": TOOL_CALLS}
REQUIRED_TABLES: Final[tuple[str, ...]] = ("programs", "turns")
