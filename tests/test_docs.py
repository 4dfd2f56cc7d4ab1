"""The documentation builds strictly (``mkdocs build --strict``: any warning, broken link or missing anchor fails),
its generated references cover every command, policy and configuration key, its figures come from the committed
reports (a missing file or key fails the build), and the commands its pages show exist (``docs/hooks/``)."""

from __future__ import annotations

import dataclasses
import html
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.conftest import ROOT

HOOKS = ROOT / "docs" / "hooks"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once by ``mkdocs build --strict`` into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)]
    r = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    )
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return out


def _page(site: Path, uri: str) -> str:
    return (site / uri / "index.html").read_text()


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The docs' generator modules, imported as the MkDocs hook imports them (from ``docs/hooks``)."""
    monkeypatch.syspath_prepend(str(HOOKS))
    names = ("gen_reports", "gen_cli", "docs_hooks")
    return SimpleNamespace(**{n: importlib.import_module(n) for n in names})


def test_every_command_has_a_section_in_the_cli_reference(site: Path) -> None:
    import typer.main

    from agentreplay.cli import app

    def walk(cmd: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        out = [path] if path else []
        if hasattr(cmd, "list_commands"):
            ctx = cmd.context_class(cmd, info_name=path[-1] if path else "agentreplay")
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if not getattr(sub, "hidden", False):
                    out += walk(sub, (*path, name))
        return out

    text = _page(site, "reference/cli")
    paths = walk(typer.main.get_command(app), ())
    assert len(paths) > 20
    missing = [" ".join(p) for p in paths if f'id="{"-".join(p)}"' not in text]
    assert missing == [], f"the CLI reference has no section for: {missing}"
    assert "--concurrency" in text and "--scheduler-address" in text


def test_the_policy_reference_lists_every_registered_policy_with_its_summary(site: Path) -> None:
    from agentreplay.kv.retention import RETENTIONS
    from agentreplay.policy.presets import PRESETS
    from agentreplay.router.admission import ADMISSIONS
    from agentreplay.router.policies import ROUTERS
    from agentreplay.scheduler.queue import QUEUE_ORDERS
    from agentreplay.scheduler.victim import VICTIMS

    text = html.unescape(_page(site, "reference/policies"))
    for reg in (ADMISSIONS, ROUTERS, QUEUE_ORDERS, VICTIMS, RETENTIONS):
        for e in reg.entries():
            assert f'id="{reg.axis}-{e.name}"' in text, f"the policy reference does not list {reg.axis} {e.name}"
            assert e.summary in text, (reg.axis, e.name)
    assert all(f"<code>{name}</code>" in text for name in PRESETS)


def test_the_config_reference_has_every_section_and_key(site: Path) -> None:
    from agentreplay.features import features, load
    from agentreplay.sim.config import SimConfig

    sections: dict[str, type] = {}
    for f in dataclasses.fields(SimConfig):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            sections[f.name] = type(default)
    for feat in features():
        if feat.config:
            sections.update(load(feat.config))
    text = _page(site, "reference/config")
    assert {"hardware", "cache", "scheduler", "policy", "router"} <= set(sections)
    for name, cls in sections.items():
        assert f'id="{name}"' in text, f"no [{name}] section in the config reference"
        for f in dataclasses.fields(cls):
            assert f"<code>{f.name}</code>" in text, f"[{name}] {f.name} is missing from the config reference"


def test_every_feature_readme_is_a_page_of_the_site(site: Path) -> None:
    readmes = sorted((ROOT / "agentreplay" / "features").glob("*/README.md"))
    for readme in readmes:
        assert (site / "how-to" / "features" / readme.parent.name / "index.html").is_file(), readme
    index = _page(site, "how-to/features")
    from agentreplay.features import features

    assert all(f.summary in html.unescape(index) for f in features())


def test_the_trace_schema_reference_lists_every_column(site: Path) -> None:
    from agentreplay.trace.schema import SCHEMAS

    text = _page(site, "reference/trace-schema")
    for table, schema in SCHEMAS.items():
        assert f"<code>{table}</code>" in text
        assert all(f"<code>{col.name}</code>" in text for col in schema)


def test_report_figures_are_read_from_the_committed_reports(site: Path) -> None:
    summary = json.loads((ROOT / "reports" / "validation" / "summary.json").read_text())
    assert html.escape(summary["end_to_end"]["line"], quote=False) in _page(site, "explanation/accuracy-and-speed")
    assert (site / "reports" / "validation" / "parity.png").is_file()
    assert "{{" not in "".join(p.read_text() for p in site.rglob("*.html"))


def test_a_macro_fails_on_a_missing_file_or_key(hooks: SimpleNamespace) -> None:
    r: ModuleType = hooks.gen_reports
    summary = "reports/validation/summary.json"
    assert r.value(ROOT, summary, "/end_to_end/cells") == str(
        json.loads((ROOT / summary).read_text())["end_to_end"]["cells"]
    )
    with pytest.raises(r.ReportError, match="does not exist"):
        r.value(ROOT, "reports/validation/no-such.json", "/a")
    with pytest.raises(r.ReportError, match="key 'no_such_key'"):
        r.value(ROOT, summary, "/end_to_end/no_such_key")
    with pytest.raises(r.ReportError, match="not a committed report path"):
        r.value(ROOT, "pyproject.toml", "/a")
    with pytest.raises(r.ReportError, match="items match"):
        r.value(ROOT, summary, "/inference_perf/targets/[metric=nope]/cells")
    with pytest.raises(r.ReportError, match="tables"):
        r.md_table(ROOT, "reports/validation/report.md", 10_000)
    page = '{{ value("reports/validation/summary.json", "/end_to_end/nope") }}'
    with pytest.raises(r.ReportError):
        r.expand(page, ROOT, "x.md")


def test_the_hook_stops_the_build_on_a_bad_macro(hooks: SimpleNamespace) -> None:
    from mkdocs.exceptions import PluginError

    page = SimpleNamespace(file=SimpleNamespace(src_uri="x.md", generated_by=None))
    config = SimpleNamespace(config_file_path=str(ROOT / "mkdocs.yml"))
    bad = '{{ value("reports/validation/summary.json", "/no/such/key") }}'
    with pytest.raises(PluginError, match=r"x\.md"):
        hooks.docs_hooks.on_page_markdown(bad, page, config, None)


def test_the_command_check_names_what_does_not_exist(hooks: SimpleNamespace) -> None:
    cmds = hooks.gen_cli.commands()
    good = "```bash\nagentreplay simulate --trace datasets/swebench-verified --concurrency 8 --out out/x\n```\n"
    assert hooks.gen_cli.check(good, cmds) == []
    bad = (
        "```bash\nagentreplay simulate --trace t --no-such-option 1 \\\n  --out o  # a comment --ignored\n"
        "agentreplay no-such-command --x\n```\nand `agentreplay validate --measured DIR --nope` in prose\n"
    )
    errors = hooks.gen_cli.check(bad, cmds)
    assert len(errors) == 3, errors
    assert "--no-such-option" in errors[0] and "no such command" in errors[1] and "--nope" in errors[2]
    group = "`agentreplay report SUB --out x` and `agentreplay report sweep d --out x`"
    assert hooks.gen_cli.check(group, cmds) == []  # a placeholder stands for any sub-command
    assert "no sub-command 'nope'" in hooks.gen_cli.check("`agentreplay report nope`", cmds)[0]
