"""Figures from committed reports, inserted into the docs at build time (never typed into prose).

A page writes a macro where a figure goes; the build replaces it with the value read from the committed report,
and fails, naming the page, file and key, when the file or the key is missing. Macros (arguments are Python
literals):

- ``value(PATH, POINTER, FORMAT="")``: one value of a JSON report, formatted with ``format(value, FORMAT)``;
- ``json_table(PATH, POINTER, COLUMNS, FORMAT="")``: a Markdown table of a JSON list of objects (the given
  keys, in order; numbers formatted with FORMAT);
- ``md_table(PATH, N=1)``: the N-th pipe table of a committed Markdown report, as it is;
- ``figure(PATH, ALT)``: a committed PNG figure (the build copies it into the site).

Each is written inside double braces, e.g. ``{{ value("reports/validation/summary.json", "/end_to_end/line") }}``.
PATH is relative to the repository root and lies under one of :data:`ROOTS`. POINTER is a JSON pointer
(RFC 6901: ``/a/0/b``, ``~1`` for a ``/`` in a key) where a segment ``[key=value]`` picks the one object of a list
whose ``key`` equals ``value``.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import gen_md as md

#: where committed reports live (the build reads nothing else)
ROOTS = ("reports/", "benchmarks/results/")
MACRO = re.compile(r"\{\{\s*(value|json_table|md_table|figure)\((.*?)\)\s*\}\}")


class ReportError(ValueError):
    """A macro that cannot be filled: a missing file or key, or a bad argument."""


def _file(root: Path, rel: str) -> Path:
    if not isinstance(rel, str) or not rel.startswith(ROOTS) or ".." in Path(rel).parts:
        raise ReportError(f"{rel!r} is not a committed report path (under {', '.join(ROOTS)})")
    path = root / rel
    if not path.is_file():
        raise ReportError(f"report file {rel} does not exist")
    return path


@cache
def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path.name} is not valid JSON: {exc}") from exc


def _step(node: Any, seg: str, rel: str, pointer: str) -> Any:
    m = re.fullmatch(r"\[([^=\]]+)=([^\]]*)\]", seg)
    if m and isinstance(node, list):
        hits = [x for x in node if isinstance(x, dict) and str(x.get(m.group(1))) == m.group(2)]
        if len(hits) != 1:
            raise ReportError(f"{rel}: {pointer}: {len(hits)} items match {seg} (need exactly one)")
        return hits[0]
    key = seg.replace("~1", "/").replace("~0", "~")
    if isinstance(node, dict) and key in node:
        return node[key]
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    raise ReportError(f"{rel}: key {key!r} of {pointer} is missing")


def lookup(root: Path, rel: str, pointer: str) -> Any:
    """The value at ``pointer`` in the JSON report ``rel``."""
    if not pointer.startswith("/"):
        raise ReportError(f"{rel}: pointer {pointer!r} must start with '/'")
    node = _json(_file(root, rel))
    for seg in pointer.split("/")[1:]:
        node = _step(node, seg, rel, pointer)
    return node


def _fmt(v: Any, spec: str) -> str:
    """``v`` formatted with ``spec``; a count (an int) keeps no decimals when ``spec`` asks for a precision."""
    if v is None:
        return "n/a"
    if not spec or isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int) and "." in spec:
        return format(v, "," if "," in spec else "")
    return format(v, spec)


def value(root: Path, rel: str, pointer: str, spec: str = "") -> str:
    v = lookup(root, rel, pointer)
    if isinstance(v, dict | list):
        raise ReportError(f"{rel}: {pointer} is a {type(v).__name__}, not a value")
    return _fmt(v, spec)


def json_table(root: Path, rel: str, pointer: str, columns: list[str], spec: str = "") -> str:
    rows = lookup(root, rel, pointer)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ReportError(f"{rel}: {pointer} is not a list of objects")
    for r in rows:
        missing = [c for c in columns if c not in r]
        if missing:
            raise ReportError(f"{rel}: {pointer}: a row has no {missing}")
    return md.table([md.cell(c) for c in columns], [[md.cell(_fmt(r[c], spec)) for c in columns] for r in rows])


def md_table(root: Path, rel: str, n: int = 1) -> str:
    tables: list[list[str]] = []
    current: list[str] = []
    for line in [*_file(root, rel).read_text().splitlines(), ""]:
        if line.lstrip().startswith("|"):
            current.append(line.strip())
        elif current:
            tables.append(current)
            current = []
    if not 1 <= n <= len(tables):
        raise ReportError(f"{rel} has {len(tables)} tables, not a table number {n}")
    return "\n".join(tables[n - 1]) + "\n"


def _args(text: str) -> tuple[Any, ...]:
    try:
        args = ast.literal_eval(f"({text},)")
    except (ValueError, SyntaxError) as exc:
        raise ReportError(f"arguments ({text}) are not Python literals: {exc}") from exc
    return tuple(args)


def figures(markdown: str) -> list[str]:
    """The report paths of a page's ``figure`` macros (the build adds those files to the site)."""
    return [str(_args(m.group(2))[0]) for m in MACRO.finditer(markdown) if m.group(1) == "figure"]


def expand(markdown: str, root: Path, page_uri: str) -> str:
    """``markdown`` with every macro replaced; :class:`ReportError` for the first one that cannot be filled."""

    def fill(m: re.Match[str]) -> str:
        kind, args = m.group(1), _args(m.group(2))
        try:
            if kind == "figure":
                rel, alt = args
                _file(root, rel)
                return f"![{alt}]({os.path.relpath(rel, os.path.dirname(page_uri) or '.')})"
            fns: dict[str, Callable[..., str]] = {"value": value, "json_table": json_table, "md_table": md_table}
            return fns[kind](root, *args)
        except TypeError as exc:
            raise ReportError(f"{kind}{args}: {exc}") from exc

    return MACRO.sub(fill, markdown)
