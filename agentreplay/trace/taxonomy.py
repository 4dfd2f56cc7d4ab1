"""Tool-class taxonomy shared by every trace source.

Distributions fitted on one source must be able to drive another, so every collector maps its native tool
calls onto the same eight classes:

========== ====================================================== ==========================================
class      what it is                                             examples (from the bundled trajectories)
========== ====================================================== ==========================================
``test``   runs code: test suites, repro scripts, ``python -c``   ``pytest astropy/modeling/tests/x.py``,
                                                                  ``./tests/runtests.py queries ordering``,
                                                                  ``python reproduce_issue.py``
``build``  build / install / environment set-up                   ``pip install -e .``, ``make``,
                                                                  ``python setup.py build_ext -i``
``edit``   writes files                                           ``sed -i 's/a/b/' f.py``,
                                                                  ``cat <<'EOF' > f.py``, ``rm x.py``,
                                                                  Claude Code ``Edit`` / ``Write``
``search`` locates code or files                                  ``grep -rn foo src``, ``find . -name x``,
                                                                  ``ls -R``, Claude Code ``Grep`` / ``Glob``
``read``   shows file contents                                    ``sed -n '240,260p' f.py``, ``nl -ba f``,
                                                                  ``head -n 20 f``, Claude Code ``Read``
``vcs``    version control                                        ``git diff``, ``git status``
``submit`` ends the task                                          ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``,
                                                                  SWE-agent ``submit``
``other``  anything else (no command, ``pwd``, ``whoami``, ...)
========== ====================================================== ==========================================

How a shell command is classified: here-document bodies are removed (their text is file content, not
commands); the command is split into simple commands at ``&&``, ``||``, ``;`` and newlines; in each pipeline
only the first command acts (``nl f | grep x`` reads ``f``); leading ``cd``, ``export``, ``env``,
``timeout``, ``VAR=value`` assignments are skipped. When a command line does several things, the class
that usually costs the most wall time wins, in the order of :data:`PRIORITY` (``sed -i ... && pytest`` is a
``test``): the class exists to predict the tool's duration.
"""

from __future__ import annotations

import re
import shlex
from typing import Final, Literal

ToolClass = Literal["test", "build", "edit", "search", "read", "vcs", "submit", "other"]
TOOL_CLASSES: Final[tuple[str, ...]] = ("test", "build", "edit", "search", "read", "vcs", "submit", "other")
#: Highest first: when a command line does several things, the first class here that matches wins.
PRIORITY: Final[tuple[str, ...]] = ("submit", "test", "build", "edit", "vcs", "search", "read", "other")

SUBMIT_MARKERS: Final = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")

# Native tool names of agents that expose tools (Claude Code, SWE-agent, OpenHands), lower-cased.
_TOOL_NAMES: Final[dict[str, str]] = {
    "read": "read",
    "view": "read",
    "open": "read",
    "goto": "read",
    "scroll_up": "read",
    "scroll_down": "read",
    "notebookread": "read",
    "cat": "read",
    "edit": "edit",
    "multiedit": "edit",
    "write": "edit",
    "notebookedit": "edit",
    "create": "edit",
    "str_replace": "edit",
    "insert": "edit",
    "undo_edit": "edit",
    "apply_patch": "edit",
    "grep": "search",
    "glob": "search",
    "ls": "search",
    "find_file": "search",
    "search_dir": "search",
    "search_file": "search",
    "websearch": "search",
    "webfetch": "search",
    "submit": "submit",
}

_WRAPPERS: Final = frozenset(
    {
        "cd",
        "export",
        "env",
        "timeout",
        "time",
        "nohup",
        "sudo",
        "command",
        "exec",
        "source",
        ".",
        "set",
        "unset",
        "(",
        "{",
        "then",
        "do",
        "else",
        "!",
    }
)
_TEST_WORDS: Final = frozenset(
    {
        "pytest",
        "py.test",
        "tox",
        "nox",
        "unittest",
        "runtests.py",
        "nosetests",
        "trial",
        "behave",
        "manage.py",
        "bin/test",
        "pylint",
        "flake8",
        "mypy",
        "ruff",
        "pyright",
    }
)
_BUILD_CMDS: Final = frozenset(
    {
        "pip",
        "pip3",
        "make",
        "cmake",
        "ninja",
        "npm",
        "yarn",
        "cargo",
        "conda",
        "apt",
        "apt-get",
        "poetry",
        "uv",
        "mvn",
        "gradle",
        "go",
        "gcc",
        "cc",
        "g++",
        "meson",
        "bazel",
        "tsc",
        "sphinx-build",
        "sphinx-apidoc",
        "maturin",
    }
)
_EDIT_CMDS: Final = frozenset(
    {"rm", "mv", "cp", "mkdir", "touch", "ed", "patch", "tee", "truncate", "ln", "chmod", "rmdir", "dd"}
)
_SEARCH_CMDS: Final = frozenset(
    {"grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "ls", "tree", "locate", "which", "whereis", "fd", "du"}
)
_READ_CMDS: Final = frozenset(
    {
        "cat",
        "head",
        "tail",
        "nl",
        "less",
        "more",
        "wc",
        "od",
        "xxd",
        "hexdump",
        "file",
        "stat",
        "diff",
        "cmp",
        "awk",
        "sort",
        "uniq",
        "cut",
        "column",
        "bat",
    }
)
#: Interpreters whose script runs code (as ``python`` does, matched by :data:`_PY`).
_INTERPRETERS: Final = ("bash", "sh", "node", "ruby", "perl", "php", "java")
#: Package-manager verbs that change the environment (anything else, e.g. ``pip list``, only inspects it).
_ENV_CHANGING_VERBS: Final = frozenset({"install", "uninstall", "download", "build", "sync", "add", "create", "wheel"})
_PY: Final = re.compile(r"^(?:.*/)?python[0-9.]*$")
_ASSIGN: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC: Final = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_SPLIT: Final = re.compile(r"&&|\|\||;|\n")
_REDIRECT_WRITE: Final = re.compile(r"(^|[^0-9&<>])>{1,2}\s*(?!&)(?!/dev/null)[^\s|;&]+")


def strip_heredocs(command: str) -> str:
    """Remove here-document bodies, keeping the line that opens each one."""
    out: list[str] = []
    terminator: str | None = None
    for line in command.splitlines():
        if terminator is not None:
            if line.strip() == terminator:
                terminator = None
            continue
        out.append(line)
        m = _HEREDOC.search(line)
        if m:
            terminator = m.group(2)
    return "\n".join(out)


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=False, posix=True)
    except ValueError:  # unbalanced quotes in a command the agent wrote: fall back to whitespace
        return segment.split()


def _classify_simple(segment: str) -> str:
    """Class of one simple command (its pipeline's first command decides)."""
    first_stage = segment.split("|", 1)[0]
    words = _strip_wrappers(_words(first_stage))
    if not words:
        return "other"
    cmd = words[0].rsplit("/", 1)[-1] if not words[0].startswith("./") else words[0]
    base = cmd.rsplit("/", 1)[-1]
    writes = bool(_REDIRECT_WRITE.search(first_stage))
    if any(m in segment for m in SUBMIT_MARKERS) or base == "submit":
        return "submit"
    if base in _TEST_WORDS or any(w in _TEST_WORDS or w.endswith("runtests.py") for w in words[:4]):
        return "test"
    if _PY.match(base) or base in _INTERPRETERS or base.startswith("./"):
        return _classify_script(base, words[1:], writes)
    if words[0] in _TEST_WORDS:
        return "test"
    return _classify_program(base, words, writes)


def _strip_wrappers(words: list[str]) -> list[str]:
    """``words`` without the leading wrappers, ``VAR=value`` assignments, options and durations
    (``timeout -s 9 30s pytest`` -> ``pytest``)."""
    while words and (
        words[0] in _WRAPPERS
        or _ASSIGN.match(words[0])
        or words[0].startswith("-")
        or re.fullmatch(r"[0-9]+[smh]?", words[0])
    ):
        words = words[1:]
    return words


def _classify_script(base: str, args: list[str], writes: bool) -> str:
    """Class of an interpreter or a local executable (``base``) run with ``args``: running code is a test
    unless it installs (``-m pip``, ``setup.py``) or only writes a file (``python > out``)."""
    if base.startswith("./") and base.endswith((".py", ".sh")):
        return "test"
    if args[:1] == ["-m"] and len(args) > 1:
        mod = args[1]
        if mod in ("pip", "build", "ensurepip", "venv"):
            return "build"
        if mod in ("pytest", "unittest", "tox", "nose", "doctest", "django"):
            return "test"
    if any(a.endswith("setup.py") for a in args):
        return "build"
    if writes and not any(a.endswith(".py") for a in args[:1]) and args[:1] != ["-c"]:
        return "edit"
    return "test"


def _classify_program(base: str, words: list[str], writes: bool) -> str:
    """Class of any other command ``base`` (``words`` with its arguments; ``writes``: it redirects into a file)."""
    if base in ("pip", "pip3", "conda", "uv", "poetry") and not _ENV_CHANGING_VERBS & set(words):
        return "other"  # pip list / freeze / show: inspects the environment, takes no build time
    if base in _BUILD_CMDS:
        if base in ("make",) and any(w in ("test", "check", "tests") for w in words[1:]):
            return "test"
        return "build"
    if base == "git":
        return "vcs"
    if base == "sed":
        return (
            "edit" if any(w == "-i" or w.startswith("-i") or w.startswith("--in-place") for w in words[1:]) else "read"
        )
    if base == "perl" and "-i" in " ".join(words[1:3]):
        return "edit"
    if base in _EDIT_CMDS or (base in ("cat", "echo", "printf") and writes):
        return "edit"
    if base in _SEARCH_CMDS:
        return "search"
    if base in _READ_CMDS:
        return "read"
    if base in ("echo", "printf") and not writes:
        return "other"
    return "edit" if writes else "other"


def classify_command(command: str | None) -> str:
    """Tool class of a shell command line (see the module docstring for the rules)."""
    if not command or not command.strip():
        return "other"
    if any(m in command for m in SUBMIT_MARKERS):
        return "submit"
    body = strip_heredocs(command).replace("\\\n", " ")
    found = {_classify_simple(seg) for seg in _SPLIT.split(body) if seg.strip()}
    for cls in PRIORITY:
        if cls in found:
            return cls
    return "other"


def classify_tool(tool_name: str | None, command: str | None = None) -> str:
    """Tool class of a named tool call; shell tools (``bash``, ``Bash``, ``execute``) look at the command.

    ``str_replace_editor`` style tools pass their sub-command (``view``, ``create``, ``str_replace``...) as
    ``command``.
    """
    name = (tool_name or "").strip().lower()
    if name in ("bash", "shell", "execute_bash", "run", "terminal", "execute", "sh", "cmd", ""):
        return classify_command(command)
    if name in ("str_replace_editor", "str_replace_based_edit_tool", "editor", "file_editor"):
        sub = (command or "").strip().lower()
        return "read" if sub in ("view", "") else "edit"
    if name in _TOOL_NAMES:
        return _TOOL_NAMES[name]
    if name in ("task", "agent", "todowrite", "todoread", "exitplanmode", "think"):
        return "other"
    return "other"
