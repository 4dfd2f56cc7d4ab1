"""Tool classes of real commands, each taken verbatim from the bundled SWE-bench Verified trajectories."""

from __future__ import annotations

import pytest

from agentreplay.trace.taxonomy import TOOL_CLASSES, classify_command, classify_tool, strip_heredocs

REAL_COMMANDS = [
    ("pytest astropy/modeling/tests/test_separable.py", "test"),
    ("./tests/runtests.py queries ordering", "test"),
    ("python reproduce_issue.py", "test"),
    ("python3 -m pytest reproduce_issue/symlink_ignore_test", "test"),
    ("bin/test sympy/physics/tests/test_secondquant.py", "test"),
    ('python3 -c "import astropy; print(astropy.__version__)"', "test"),
    ("PYTHONPATH=. django-admin test_command --settings=reproduction.settings --skip-checks", "other"),
    ("export LANG=C.UTF-8\nexport LC_ALL=C.UTF-8\nPYTHONPATH=. python3 tests/runtests.py admin_scripts", "test"),
    ('cd reproduction && make html && grep "MyClass" _build/html/index.html', "build"),
    ("cd reproduce_issue && sphinx-build -b html . _build/html", "build"),
    ("pip list | grep sphinx", "other"),
    ("cat <<'EOF' > reproduce_issue.py\nfrom astropy.modeling import models as m\nimport pytest\nEOF", "edit"),
    ("sed -i 's/foo/bar/' astropy/modeling/separable.py", "edit"),
    ("rm reproduce_issue.py", "edit"),
    ("mkdir -p reproduce_app/migrations\ntouch reproduce_app/__init__.py", "edit"),
    ("cp astropy/timeseries/core.py astropy/timeseries/core.py.bak", "edit"),
    ('grep -n "parent_inserted =" django/db/models/base.py', "search"),
    ('find astropy/table -name "test*.py"', "search"),
    ("ls -R", "search"),
    ("sed -n '240,260p' astropy/modeling/separable.py", "read"),
    ('nl -ba django/db/models/query.py | grep -n "def _batched_insert" -A 30', "read"),
    ("head -n 20 astropy/table/tests/test_mixin.py", "read"),
    ("cat django/utils/deprecation.py", "read"),
    ("git diff", "vcs"),
    ("git checkout sympy/polys/factortools.py", "vcs"),
    ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached", "submit"),
    ("whoami", "other"),
    ("", "other"),
]


@pytest.mark.parametrize(("command", "expected"), REAL_COMMANDS)
def test_real_commands(command: str, expected: str) -> None:
    assert classify_command(command) == expected


def test_heredoc_body_is_not_a_command() -> None:
    cmd = "cat <<'EOF' > t.py\npytest is mentioned here\ngit diff\nEOF\nls"
    assert strip_heredocs(cmd) == "cat <<'EOF' > t.py\nls"
    assert classify_command(cmd) == "edit"


def test_costliest_class_wins_in_compound_commands() -> None:
    assert classify_command("sed -i 's/a/b/' f.py && pytest tests/") == "test"
    assert classify_command("grep -rn foo . ; git status") == "vcs"


@pytest.mark.parametrize(
    ("tool", "command", "expected"),
    [
        ("Read", None, "read"),
        ("Edit", None, "edit"),
        ("Write", None, "edit"),
        ("Grep", None, "search"),
        ("Glob", None, "search"),
        ("Bash", "python -m pytest -x", "test"),
        ("Task", None, "other"),
        ("str_replace_editor", "view", "read"),
        ("str_replace_editor", "str_replace", "edit"),
        ("submit", None, "submit"),
        ("bash", "pip install -e .", "build"),
        ("SomethingNew", None, "other"),
    ],
)
def test_named_tools(tool: str, command: str | None, expected: str) -> None:
    assert classify_tool(tool, command) == expected
    assert expected in TOOL_CLASSES
