"""Markdown helpers shared by the reference generators: escaping, tables, docstrings and field docs.

Docstrings in the package are written in reStructuredText-flavoured prose (``code``, :mod:`x` roles, simple
tables); :func:`prose` turns them into Markdown that MkDocs renders without warnings. A dataclass field's doc is its
``#:`` comment (the Sphinx autodoc convention the package follows): on the lines just above the field, or after
it on the same line (:func:`field_docs`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import html
import importlib
import inspect
import io
import re
import sys
import tokenize
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

_ROLE = re.compile(r":(?:py:)?(?:mod|class|func|meth|data|attr|obj|exc|const|ref|doc):`~?([^`]+)`")
_RST_TABLE_RULE = re.compile(r"^\s*=+(?:\s+=+)+\s*$")


_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def _escape(text: str, pipes: bool) -> str:
    """``text`` with ``<`` and ``&`` (and ``|`` in a table) escaped outside its code spans, which Markdown shows
    as written (``*`` is left alone: a docstring's ``*word*`` is emphasis, and ``a * b`` stays a product)."""
    out, last = [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [_escape_plain(text[last : m.start()], pipes), m.group(0)]
        last = m.end()
    return "".join([*out, _escape_plain(text[last:], pipes)])


def _escape_plain(text: str, pipes: bool) -> str:
    s = html.escape(text, quote=False)
    return s.replace("|", "\\|") if pipes else s


def cell(text: object) -> str:
    """``text`` as one Markdown table cell: on one line, with what a table or HTML would eat escaped."""
    return _escape(" ".join(str(text).split()), pipes=True)


def code(text: object) -> str:
    """``text`` as an inline code span (longer fences when it holds backticks); a table cell may hold it as is."""
    s = str(text)
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown pipe table; cells are used as given (escape them with :func:`cell` / :func:`code`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _fence_rst_tables(lines: list[str]) -> list[str]:
    """Wrap each reST simple table (rules of ``=`` runs, three of them) in a ``text`` code fence."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _RST_TABLE_RULE.match(lines[i]):
            rules = [j for j in range(i, len(lines)) if _RST_TABLE_RULE.match(lines[j])][:3]
            if len(rules) == 3:
                out += ["```text", *lines[i : rules[2] + 1], "```"]
                i = rules[2] + 1
                continue
        out.append(lines[i])
        i += 1
    return out


def _fence_literal_blocks(lines: list[str]) -> list[str]:
    """A paragraph ending in ``::`` introduces an indented literal block: fence it (reST -> Markdown)."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line[:-1] if line.rstrip().endswith("::") else line)
        if line.rstrip().endswith("::"):
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            block: list[str] = []
            while j < len(lines) and (not lines[j].strip() or lines[j].startswith((" ", "\t"))):
                block.append(lines[j])
                j += 1
            if block:
                while block and not block[-1].strip():
                    block.pop()
                out += ["", "```text", *(b[4:] if b.startswith("    ") else b.lstrip() for b in block), "```", ""]
                i = j
                continue
        i += 1
    return out


def _definition_lists(lines: list[str]) -> list[str]:
    """reST definition lists (a term line, then its definition indented under it) as Markdown list items."""
    out: list[str] = []
    fenced, i = False, 0
    while i < len(lines):
        line = lines[i]
        fenced = fenced != line.startswith("```")
        after = i == 0 or not lines[i - 1].strip() or lines[i - 1].startswith("    ")
        starts = not fenced and line.strip() and not line[0].isspace() and after
        if starts and i + 1 < len(lines) and lines[i + 1].startswith("    "):
            j = i + 1
            while j < len(lines) and lines[j].startswith("    "):
                j += 1
            out.append(f"- {line.strip()}: " + " ".join(x.strip() for x in lines[i + 1 : j]))
            i = j
            continue
        out.append(line)
        i += 1
    return out


def prose(doc: str | None) -> str:
    """A docstring as Markdown: dedented, Sphinx roles as code spans, reST tables and literal blocks fenced, and
    ``<`` escaped outside code (a docstring's ``<=`` or ``<path>`` is text, not HTML)."""
    if not doc:
        return ""
    text = _ROLE.sub(lambda m: f"``{m.group(1)}``", inspect.cleandoc(doc))
    lines = _definition_lists(_fence_literal_blocks(_fence_rst_tables(text.splitlines())))
    out: list[str] = []
    para: list[str] = []
    fenced = False
    for line in [*lines, ""]:
        if not fenced and (line.startswith("```") or not line.strip()):
            out += _escape("\n".join(para), pipes=False).splitlines() if para else []
            para = []
        if line.startswith("```"):
            fenced = not fenced
            out.append(line)
        elif fenced or not line.strip():
            out.append(line)
        else:
            para.append(line)
    return "\n".join(out).strip() + "\n"


def first_line(doc: str | None) -> str:
    """The first sentence-line of a docstring (its summary), or ""."""
    return inspect.cleandoc(doc).splitlines()[0].strip() if doc and doc.strip() else ""


def _comments(source: str) -> dict[int, str]:
    """``#:`` comments of ``source`` by line number (1-based), their text stripped."""
    found: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("#:"):
            found[tok.start[0]] = tok.string[2:].strip()
    return found


@functools.cache
def _module_tree(module: str) -> tuple[ast.Module, str] | None:
    """The parsed source of ``module`` (read from its ``.py`` file even when a compiled build of it was imported:
    mypyc modules have no source for :mod:`inspect`), or None when it has none."""
    mod = sys.modules.get(module) or importlib.import_module(module)
    file = getattr(mod, "__file__", None)
    if not file:
        return None
    path = Path(file)
    if path.suffix != ".py":
        path = path.with_name(path.name.split(".")[0] + ".py")
    if not path.is_file():
        return None
    source = path.read_text()
    return ast.parse(source), source


_Def = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _node(obj: Any) -> tuple[_Def, str] | None:
    """The ``class`` or ``def`` statement of ``obj`` in its module's source, and that source."""
    found = _module_tree(obj.__module__)
    if found is None:
        return None
    tree, source = found
    scope: list[ast.stmt] = tree.body
    node: _Def | None = None
    for part in obj.__qualname__.split("."):
        node = next((n for n in scope if isinstance(n, _Def) and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return (node, source) if node is not None else None


def module_doc(module: str) -> str:
    """The docstring of ``module``, read from its source (compiled builds included)."""
    found = _module_tree(module)
    return (ast.get_docstring(found[0]) if found else None) or getattr(sys.modules.get(module), "__doc__", "") or ""


def doc_of(obj: Any) -> str:
    """The docstring of a class or function, read from its source (compiled builds included)."""
    found = _node(obj)
    return (ast.get_docstring(found[0]) if found else None) or obj.__doc__ or ""


def _own_fields(cls: type) -> dict[str, tuple[str, str]]:
    """``name -> (annotation text, #: doc)`` of the fields ``cls`` itself declares."""
    found = _node(cls)
    if found is None:
        return {}
    node, source = found
    comments = _comments(source)
    lines = source.splitlines()
    out: dict[str, tuple[str, str]] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above: list[str] = []
        n = stmt.lineno - 1
        while n >= 1 and n in comments and lines[n - 1].lstrip().startswith("#:"):
            above.insert(0, comments[n])
            n -= 1
        after = comments.get(stmt.end_lineno or stmt.lineno)
        out[stmt.target.id] = (ast.unparse(stmt.annotation), " ".join([*above, after] if after else above))
    return out


def _fields_source(cls: type) -> dict[str, tuple[str, str]]:
    merged: dict[str, tuple[str, str]] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base):
            merged.update(_own_fields(base))
    return merged


def field_docs(cls: type) -> dict[str, str]:
    """Each field's ``#:`` doc of dataclass ``cls`` (its bases' included; a field without one is absent)."""
    return {name: doc for name, (_, doc) in _fields_source(cls).items() if doc}


def type_text(tp: Any) -> str:
    """A type annotation as a reader of a TOML file needs it: literals spelled out, ``None`` for unset."""
    if tp is type(None) or tp is None:
        return "None"
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        inner = ", ".join("..." if a is Ellipsis else type_text(a) for a in args)
        return f"{name}[{inner}]" if args else name
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def field_types(cls: type) -> dict[str, str]:
    """Each field's type of dataclass ``cls`` as :func:`type_text` (the annotation's text where it cannot be
    resolved, e.g. a name imported only for type checking)."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError, AttributeError):
        hints = {}
    written = _fields_source(cls)
    return {
        f.name: type_text(hints[f.name]) if f.name in hints else written.get(f.name, (str(f.type), ""))[0]
        for f in dataclasses.fields(cls)
    }


def toml_value(value: Any) -> str:
    """A default value as it is written in a TOML config (``unset`` for None, which TOML cannot spell)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return toml_value(dataclasses.asdict(value))
    return repr(value)


def default_of(f: dataclasses.Field[Any]) -> Any:
    """The default value of dataclass field ``f`` (its factory called); ``dataclasses.MISSING`` if it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING
