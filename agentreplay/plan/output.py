"""The plan's output folder: written as a whole (:func:`agentreplay.outdir.staged`), its sweep results reused.

``OUT`` holds ``plan.md``, ``plan.json``, ``configurations.csv``, ``cost_vs_slo.png`` and ``sweep/`` (every cell
simulated, one Parquet row per cell and seed). A run:

- stages a new folder beside ``OUT`` and starts its ``sweep/`` with the result files of ``OUT/sweep`` when they
  are of the same sweep (same trace, base config and swept paths: the sweep fingerprint), hard-linked (copied
  where links are not possible), so a rerun reuses every cell it has; results of another sweep (another load,
  ``--max-programs``, base config) are simply not carried over, and the rerun replaces the folder;
- on success replaces ``OUT`` as a whole (nothing of an earlier plan with other options remains);
- on failure leaves ``OUT`` as it was;
- on Ctrl-C leaves ``OUT``'s plan as it was and keeps the cells finished so far where a rerun of the same
  command finds them (:func:`keep`): added to ``OUT/sweep`` when that holds the same sweep, or as ``OUT/sweep``
  of a folder holding only them when ``OUT`` did not exist (or was empty); when ``OUT`` holds another plan they
  are not kept (it stays whole).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agentreplay.outdir import mark, staged
from agentreplay.sweep.runner import MANIFEST

KIND = "plan"


@dataclass(slots=True)
class Staging:
    """The staged folder of a plan run, and what an interruption kept (set on KeyboardInterrupt)."""

    path: Path  #: the temporary folder the plan writes (its sweep results in ``path / "sweep"``)
    carried: int = 0  #: result files carried over from ``OUT/sweep``
    kept: str = ""  #: one sentence: where the finished cells of an interrupted run are


def sweep_fingerprint(sweep_dir: Path) -> str | None:
    """The fingerprint recorded in a sweep folder's manifest (None: none, or unreadable)."""
    try:
        return str(json.loads((sweep_dir / MANIFEST).read_text()).get("fingerprint"))
    except (OSError, ValueError, AttributeError):
        return None


def carry_over(out: Path, tmp: Path, fingerprint: str) -> int:
    """Link ``out/sweep``'s result files into ``tmp/sweep`` when they are of the sweep ``fingerprint``; returns
    how many. Result files are replaced, never rewritten in place, so a link never changes ``out``."""
    src = out / "sweep"
    if sweep_fingerprint(src) != fingerprint:
        return 0
    n = 0
    for f in sorted(src.glob("results/*/*.parquet")):
        _link(f, tmp / "sweep" / f.relative_to(src))
        n += 1
    return n


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def keep(out: Path, tmp: Path, fingerprint: str) -> str:
    """After an interruption: keep ``tmp``'s finished cells where a rerun finds them (module docstring) and
    say where, in one sentence."""
    src = tmp / "sweep"
    new = [f for f in sorted(src.glob("results/*/*.parquet")) if not (out / "sweep" / f.relative_to(src)).exists()]
    if not new:
        return f"{out} left as it was (no new cell had finished)"
    fresh = not out.exists() or not any(out.iterdir())
    if fresh:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, out / "sweep", copy_function=_move)
        mark(out, KIND)
        return (
            f"{len(new)} finished cell(s) kept in {out}/sweep (no plan written yet); rerun the same command to "
            "resume from them"
        )
    if sweep_fingerprint(out / "sweep") == fingerprint:
        for f in new:
            dst = out / "sweep" / f.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(f, dst)
        return (
            f"{out}: the previous plan left as it was; {len(new)} finished cell(s) added to {out}/sweep; rerun the "
            "same command to resume from them"
        )
    return (
        f"{out} left as it was (it holds another plan's results); the {len(new)} cell(s) finished were not kept, "
        "so a rerun starts over"
    )


def _move(src: str, dst: str) -> None:
    os.replace(src, dst)


@contextmanager
def plan_output(out: str | os.PathLike[str], fingerprint: str) -> Iterator[Staging]:
    """Stage the plan's folder (module docstring); refuses, before anything runs, a folder agentreplay did not
    write (:class:`agentreplay.outdir.OutputDirError`)."""
    out = Path(out)
    with staged(out, KIND) as tmp:
        st = Staging(tmp, carry_over(out, tmp, fingerprint))
        try:
            yield st
        except KeyboardInterrupt:
            st.kept = keep(out, tmp, fingerprint)
            raise
