"""The command-line reference (``reference/cli.md``), generated from the typer application at build time.

Every command and sub-command of ``agentreplay`` (:data:`agentreplay.cli.app`, built into its click command the
way ``agentreplay --help`` builds it), with its help, its usage and every argument and option as ``--help``
renders them (names, metavar, default, required). :func:`commands` is also what the docs' command check reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gen_md as md

_TRAILER = re.compile(r"\s*\[(default: [^\]]*|required|env var: [^\]]*)\]\s*$")


class CliDocError(RuntimeError):
    """The command tree cannot be documented as it is (names the commands)."""


@dataclass(frozen=True)
class Command:
    """One command: its words after ``agentreplay`` (``("report", "sweep")``) and its click object."""

    path: tuple[str, ...]
    obj: Any

    @property
    def name(self) -> str:
        return " ".join(("agentreplay", *self.path))

    def context(self) -> Any:
        return self.obj.context_class(self.obj, info_name=self.path[-1] if self.path else "agentreplay")

    def options(self) -> set[str]:
        """Every option name the command accepts (``--help`` included)."""
        names = {"--help"}
        for p in self.obj.params:
            names |= {*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())}
        return {n for n in names if n.startswith("-")}


def _walk(obj: Any, path: tuple[str, ...]) -> Iterator[Command]:
    yield Command(path, obj)
    if hasattr(obj, "list_commands"):
        ctx = obj.context_class(obj, info_name=path[-1] if path else "agentreplay")
        for name in obj.list_commands(ctx):
            sub = obj.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from _walk(sub, (*path, name))


def commands() -> list[Command]:
    """``agentreplay`` and every command below it, in ``--help`` order, depth first."""
    import typer.main

    from agentreplay.cli import app

    return list(_walk(typer.main.get_command(app), ()))


def _split_trailer(text: str) -> tuple[str, list[str]]:
    """``help [default: x]  [required]`` -> ``("help", ["default: x", "required"])``."""
    marks: list[str] = []
    while m := _TRAILER.search(text):
        marks.insert(0, m.group(1))
        text = text[: m.start()]
    return text.strip(), marks


def _help_blocks(text: str) -> str:
    """A command's help as Markdown: paragraphs as text, ``Example:`` / ``Then:`` lines as shell blocks."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text.replace("\b", "").strip()):
        lines = [ln.strip() for ln in para.splitlines() if ln.strip()]
        if lines and re.match(r"^(Examples?|Then):", lines[0]):
            cmds: list[str] = []
            for ln in lines:
                m = re.match(r"^(?:Examples?|Then):\s*(.*)$", ln)
                if m:
                    cmds.append(m.group(1))
                elif cmds:
                    cmds[-1] += " " + ln
            out.append("```bash\n" + "\n".join(cmds) + "\n```\n")
        else:
            out.append(md.prose(" ".join(lines)))
    return "\n".join(out)


def _params_table(cmd: Command) -> str:
    ctx = cmd.context()
    rows = []
    for p in cmd.obj.params:
        record = p.get_help_record(ctx)
        if record is None or getattr(p, "hidden", False):
            continue
        names, help_text = record
        text, marks = _split_trailer(help_text)
        default = next((m.split(": ", 1)[1] for m in marks if m.startswith("default: ")), "")
        kind = "argument" if p.param_type_name == "argument" else "option"
        rows.append(
            [
                md.code(names),
                kind + (", required" if "required" in marks else ""),
                md.code(default) if default else "",
                md.cell(text),
            ]
        )
    return md.table(["name", "kind", "default", "meaning"], rows) if rows else "No arguments or options.\n"


def _anchor(cmd: Command) -> str:
    return "-".join(cmd.path) or "agentreplay"


def page() -> str:
    """The whole command-line reference page."""
    cmds = commands()
    anchors = [_anchor(c) for c in cmds]
    clashes = sorted({a for a in anchors if anchors.count(a) > 1})
    if clashes:
        raise CliDocError(f"commands whose reference sections would share an anchor: {clashes}")
    top = cmds[0]
    parts = [
        "# Command-line reference\n",
        "Generated at build time from the typer application (`agentreplay.cli.app`): every command, argument and "
        "option, as `agentreplay COMMAND --help` prints them.\n",
        md.prose(top.obj.help or ""),
        "| command | what it does |\n|---|---|",
    ]
    for c in cmds[1:]:
        summary = c.obj.get_short_help_str(limit=200) if hasattr(c.obj, "get_short_help_str") else ""
        parts.append(f"| [`{' '.join(c.path)}`](#{_anchor(c)}) | {md.cell(summary)} |")
    parts.append("")
    for c in cmds[1:]:
        usage = " ".join(c.obj.collect_usage_pieces(c.context()))
        parts += [
            f"## {' '.join(c.path)} {{#{_anchor(c)}}}\n",
            f"```text\n{c.name} {usage}\n```\n",
            _help_blocks(c.obj.help or ""),
        ]
        if hasattr(c.obj, "list_commands"):
            subs = [f"[`{' '.join(s.path)}`](#{_anchor(s)})" for s in cmds if s.path[:-1] == c.path]
            parts.append("Sub-commands: " + ", ".join(subs) + ".\n")
        else:
            parts.append(_params_table(c))
        if c.obj.epilog:
            parts.append("```text\n" + c.obj.epilog.replace("\\[", "[").strip() + "\n```\n")
    return "\n".join(parts)


def _blocks(markdown: str) -> tuple[list[str], str]:
    """``(shell code blocks, the prose outside any fenced block)`` of a page."""
    shell: list[str] = []
    prose: list[str] = []
    current: list[str] | None = None
    lang = ""
    for line in markdown.splitlines():
        fence = re.match(r"^\s*(```+|~~~+)\s*([\w-]*)", line)
        if current is None and fence:
            current, lang = [], fence.group(2)
        elif current is not None and fence and not fence.group(2):
            if lang in ("bash", "sh", "shell", "console"):
                shell.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
        else:
            prose.append(line)
    return shell, "\n".join(prose)


def _mentions(markdown: str) -> list[str]:
    """The ``agentreplay ...`` command lines of a page: in shell code blocks (continuation lines joined, comments
    dropped) and in inline code spans."""
    shell, prose = _blocks(markdown)
    found: list[str] = []
    for block in shell:
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|\||;|\|", line.split(" #", 1)[0]):
                words = part.strip().removeprefix("$ ").strip()
                if words.startswith("agentreplay "):
                    found.append(words)
    found += [s for s in re.findall(r"`([^`\n]+)`", prose) if s.startswith("agentreplay ")]
    return found


def check(markdown: str, cmds: list[Command]) -> list[str]:
    """Each command a page mentions that ``agentreplay`` does not have, or an option its command does not take."""
    by_path = {c.path: c for c in cmds}
    errors = []
    for line in _mentions(markdown):
        words = line.split()[1:]
        path: tuple[str, ...] = ()
        for w in words:
            if (*path, w) not in by_path:
                break
            path = (*path, w)
        cmd, rest = by_path[path], words[len(path) :]
        if not path and (not rest or not rest[0].startswith("-")):
            errors.append(f"`{line}`: no such command")
            continue
        if hasattr(cmd.obj, "list_commands") and rest and not rest[0].startswith("-") and not rest[0].isupper():
            errors.append(f"`{line}`: {cmd.name} has no sub-command {rest[0]!r}")
            continue
        known = cmd.options()
        if hasattr(cmd.obj, "list_commands") and rest and rest[0].isupper():  # a placeholder: any sub-command
            known |= {o for c in cmds if c.path[:-1] == path for o in c.options()}
        bad = [w.split("=")[0] for w in rest if w.startswith("--") and w.split("=")[0] not in known]
        if bad:
            errors.append(f"`{line}`: {cmd.name} has no option {', '.join(bad)}")
    return errors
