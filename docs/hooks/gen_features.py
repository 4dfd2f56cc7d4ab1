"""The feature pages (``how-to/features/<name>.md``): each ``agentreplay/features/<name>/README.md`` that exists at
build time, included as written, and an index of every registered feature.

A README is written to be read in the repository, so its relative links point at source files; the docs hold
only pages. Links to another feature's README become links to its page, links into ``docs/`` stay links, and any
other relative link becomes its repository path in code (the strict build would fail on it otherwise).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import gen_md as md

PAGES = "how-to/features"
_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)(\s+\"[^\"]*\")?\)")


@dataclass(frozen=True)
class FeaturePage:
    """A feature's page: its name, its source README and the Markdown to publish."""

    name: str
    source: Path
    markdown: str


def _readmes(root: Path) -> dict[str, Path]:
    """Every ``agentreplay/features/<name>/README.md``, by folder name: the registry's features in its order,
    then any other folder holding one, by name."""
    from agentreplay.features import features

    found = {p.parent.name: p for p in sorted((root / "agentreplay" / "features").glob("*/README.md"))}
    ordered = {f.name: found[f.name] for f in features() if f.name in found}
    return {**ordered, **{n: p for n, p in found.items() if n not in ordered}}


def _rewrite(text: str, readme: Path, root: Path, names: dict[Path, str]) -> str:
    docs, here = root / "docs", root / "docs" / PAGES

    def fix(m: re.Match[str]) -> str:
        bang, label, target, title = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = (readme.parent / path).resolve()
        suffix = f"#{anchor}" if anchor else ""
        if resolved in names:
            return f"{bang}[{label}]({names[resolved]}.md{suffix}{title})"
        if resolved.is_relative_to(docs) and resolved.is_file():
            return f"{bang}[{label}]({os.path.relpath(resolved, here)}{suffix}{title})"
        where = os.path.relpath(resolved, root) if resolved.is_relative_to(root) else path
        shown = md.code(where)
        return shown if label.strip("` ") in (path, where, "") else f"{label} ({shown})"

    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        out.append(line if fenced else _LINK.sub(fix, line))
    return "\n".join(out) + "\n"


def pages(root: Path) -> list[FeaturePage]:
    """The feature pages to publish, in registry order."""
    readmes = _readmes(root)
    names = {p.resolve(): n for n, p in readmes.items()}
    return [FeaturePage(n, p, _rewrite(p.read_text(), p, root, names)) for n, p in readmes.items()]


def index(root: Path, owned: dict[str, list[str]]) -> str:
    """The features index page: every registered feature, with its summary, its configuration sections
    (``owned``: feature name -> section names) and its page."""
    from agentreplay.features import features

    with_page = {p.name for p in pages(root)}
    rows = []
    for f in features():
        sections = owned.get(f.name, [])
        rows.append(
            [
                f"[{f.name}]({f.name}.md)" if f.name in with_page else md.code(f.name),
                md.cell(f.summary),
                ", ".join(f"[`[{s}]`](../../reference/config.md#{s})" for s in sections) or "none",
                "yes" if f.mechanism else "no (a study)",
                str(len(f.experiments)),
            ]
        )
    return "\n".join(
        [
            "# Features\n",
            "Optional parts of the simulator and the studies built on them, one folder each under "
            "`agentreplay/features/` (listed by `agentreplay.features.registry`, in the order their mechanisms "
            "attach to a simulated cluster). A feature with a configuration section is off until its section "
            "turns it on; its experiments are run with `agentreplay fleet NAME` (`agentreplay fleet --help` "
            "lists them). Each feature's page is its folder's `README.md`.\n",
            md.table(["feature", "what it is", "config section", "changes the simulation", "experiments"], rows),
        ]
    )
