"""Output folders written as a whole: stage into a sibling temporary folder, then swap it in.

A command that writes a folder of results (``simulate``, ``compare``, ``validate``, ...) writes it through
:func:`staged`, so that

- a folder never mixes two runs: a rerun replaces the whole folder (a ``decisions.jsonl`` or a preset folder
  left by an earlier run with other options disappears with it);
- a failed or interrupted run leaves the previous folder as it was (and no empty folder where there was none);
- a folder agentreplay did not write is never replaced: a non-empty folder is overwritten only when it holds
  the marker file :data:`MARKER` (written into every staged folder), or, for folders written before the marker
  existed, when it holds the command's signature file and every entry in it is a name the command itself
  writes (:data:`KINDS`).

The swap is two renames (old folder aside, new folder in) and a delete of the old one; a crash between the two
renames leaves the old folder as ``.NAME.old-*`` beside the new location, never a half-written folder under
the output name.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: File written into every output folder agentreplay writes (JSON: the command that wrote it).
MARKER = ".agentreplay-output"

#: Per command, the file every output of it holds, and the entry names (glob patterns) of what it writes;
#: ``NAME/KIND`` is a folder of kind KIND, ``NAME/`` any folder. Used only to recognise folders written before
#: the marker existed.
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "simulate": (
        "summary.json",
        (
            "turns.parquet",
            "programs.parquet",
            "instances.parquet",
            "summary.json",
            "config.toml",
            "decisions.jsonl",
            "failover.parquet",
        ),
    ),
    "compare": ("compare.parquet", ("compare.parquet", "jct_cdf.png", "*/simulate")),
    "validate": ("errors.parquet", ("*.parquet", "*.png", "*.md", "*.html", "*.json")),
    "trace": ("programs.parquet", ("programs.parquet", "turns.parquet", "tool_calls.parquet", "MANIFEST.json")),
    "sweep": ("sweep.json", ("sweep.json", "base-config.toml", "results/", "report/")),
    "plan": ("plan.json", ("plan.json", "plan.md", "configurations.csv", "cost_vs_slo.png", "sweep/sweep")),
}


class OutputDirError(ValueError):
    """The output folder cannot be used (not a folder, or not written by agentreplay)."""


def _is_ours(entry: Path, kind: str) -> bool:
    if entry.name == MARKER or (entry.name.startswith(".") and entry.name.endswith(".tmp")):
        return True
    for pat in KINDS[kind][1] if kind in KINDS else ():
        if "/" in pat:
            name, sub = pat.split("/", 1)
            if entry.is_dir() and fnmatch.fnmatchcase(entry.name, name) and (not sub or owned(entry, sub)):
                return True
        elif entry.is_file() and fnmatch.fnmatchcase(entry.name, pat):
            return True
    return False


def owned(path: str | os.PathLike[str], kind: str) -> bool:
    """True when ``path`` may be replaced by a ``kind`` run: missing, empty, marked, or holding the signature
    file of a ``kind`` run and only names such a run writes."""
    p = Path(path)
    if not p.exists():
        return True
    if not p.is_dir():
        return False
    if (p / MARKER).is_file():
        return True
    entries = list(p.iterdir())
    if not entries:
        return True
    return kind in KINDS and (p / KINDS[kind][0]).is_file() and all(_is_ours(e, kind) for e in entries)


def check(path: str | os.PathLike[str], kind: str) -> Path:
    """``path`` as a Path if a ``kind`` run may write it, else :class:`OutputDirError` saying why."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputDirError(f"{p}: exists and is not a folder; choose another output folder")
    if not owned(p, kind):
        foreign = sorted(e.name for e in p.iterdir() if not _is_ours(e, kind))
        raise OutputDirError(
            f"{p}: not empty and not written by agentreplay (no {MARKER} file; it holds {', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}); choose another output folder or empty this one"
        )
    return p


def mark(path: str | os.PathLike[str], kind: str) -> None:
    """Write the marker into ``path`` (a folder agentreplay writes in place, e.g. a resumable sweep)."""
    Path(path, MARKER).write_text(json.dumps({"written_by": "agentreplay", "kind": kind}) + "\n")


@contextmanager
def staged(path: str | os.PathLike[str], kind: str) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; when the block succeeds it replaces ``path`` as a whole.

    Refuses (:class:`OutputDirError`, before anything runs) a ``path`` that agentreplay did not write. When the
    block raises, the temporary folder is removed and ``path`` (and any parent this call created) is left as it
    was.
    """
    out = check(path, kind)
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)  # mkdtemp creates 0700; outputs are ordinary shareable folders
        mark(tmp, kind)
        check(out, kind)  # still ours (nothing else wrote there meanwhile)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in created:  # innermost first
            try:
                p.rmdir()
            except OSError:
                break
        raise
