"""Validation of fan-out links (schema version 3 ``programs.parent_program_id`` / ``parent_turn_idx`` /
``spawn_delay_s``): every message names the file (``where``), the field, the program and the value.
(:func:`agentreplay.trace.io.validate` raises it as a ``TraceError``; this module imports nothing of io.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


class LinkError(ValueError):
    """A bad fan-out link (the message is complete)."""


def validate_links(progs: pd.DataFrame, where: str) -> None:
    """A parent must exist, be another program, and have the spawning turn (``0 <= parent_turn_idx < n_turns``);
    a child's ``parent_turn_idx`` is required and ``spawn_delay_s`` (when set) is non-negative; the links may not
    form a cycle (a program cannot wait on its own descendant)."""
    ids = progs["program_id"].tolist()
    n_turns = dict(zip(ids, progs["n_turns"].astype("int64").tolist(), strict=True))
    parents = progs["parent_program_id"].tolist()
    turns = progs["parent_turn_idx"].tolist()
    delays = progs["spawn_delay_s"].tolist() if "spawn_delay_s" in progs.columns else [None] * len(ids)
    parent_of: dict[str, str] = {}
    for pid, parent, t, d in zip(ids, parents, turns, delays, strict=True):
        if _missing(parent):
            if not _missing(t):
                raise LinkError(
                    f"{where}: programs.parent_turn_idx = {int(t)} for program {pid!r}, which has no parent_program_id"
                )
            continue
        if parent not in n_turns:
            raise LinkError(f"{where}: programs.parent_program_id = {parent!r} for program {pid!r}: no such program")
        if parent == pid:
            raise LinkError(f"{where}: programs.parent_program_id = {parent!r} for program {pid!r}: its own parent")
        if _missing(t):
            raise LinkError(f"{where}: programs.parent_turn_idx is null for program {pid!r}, child of {parent!r}")
        if not 0 <= int(t) < n_turns[parent]:
            raise LinkError(
                f"{where}: programs.parent_turn_idx = {int(t)} for program {pid!r} out of range: its parent "
                f"{parent!r} has turns 0..{n_turns[parent] - 1}"
            )
        if not _missing(d) and float(d) < 0:
            raise LinkError(f"{where}: programs.spawn_delay_s = {float(d)} negative for program {pid!r}")
        parent_of[pid] = parent
    for start in parent_of:
        seen = {start}
        p = parent_of.get(start)
        while p is not None:
            if p in seen:
                raise LinkError(
                    f"{where}: programs.parent_program_id forms a cycle through program {p!r} (from {start!r})"
                )
            seen.add(p)
            p = parent_of.get(p)


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and v != v)
