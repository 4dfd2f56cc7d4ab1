"""MkDocs hooks of the agentreplay documentation (``hooks:`` in mkdocs.yml).

- ``on_config``: the repository's own sources come first on ``sys.path`` (the docs describe this checkout), and
  the nav's "Features" section gets one entry per feature page.
- ``on_files``: the generated pages join the site: the references (command line, configuration, trace schema,
  policies: :mod:`gen_cli`, :mod:`gen_config`, :mod:`gen_schema`, :mod:`gen_policies`), the feature pages and
  their index (:mod:`gen_features`), and the committed report figures the pages show (:mod:`gen_reports`).
- ``on_page_markdown``: report macros are filled from the committed reports, and every ``agentreplay`` command
  line a hand-written page shows is checked against the CLI (a command or option that does not exist fails the
  build).

Any failure raises :class:`mkdocs.exceptions.PluginError`, which stops the build whether or not it is strict.
"""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import Any

import gen_cli
import gen_config
import gen_features
import gen_policies
import gen_reports
import gen_schema
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.agentreplay")
FEATURES_NAV = "Features"  #: the nav section the feature pages are added to


def _root(config: Any) -> Path:
    return Path(config.config_file_path).resolve().parent


@functools.cache
def _commands() -> list[gen_cli.Command]:
    return gen_cli.commands()


def _expand_features(nav: list[Any], entries: list[Any]) -> bool:
    """Put ``entries`` after the first page of the nav section named :data:`FEATURES_NAV`; True when found."""
    for item in nav:
        if isinstance(item, dict):
            for title, value in item.items():
                if title == FEATURES_NAV and isinstance(value, list):
                    value[:] = value[:1] + entries
                    return True
                if isinstance(value, list) and _expand_features(value, entries):
                    return True
    return False


def on_config(config: Any) -> Any:
    root = str(_root(config))
    if root not in sys.path:
        sys.path.insert(0, root)
    pages = gen_features.pages(_root(config))
    entries = [{p.name: f"{gen_features.PAGES}/{p.name}.md"} for p in pages]
    if not _expand_features(config.nav or [], entries):
        raise PluginError(f"mkdocs.yml: the nav has no {FEATURES_NAV!r} section for the feature pages")
    return config


def _generated(config: Any) -> dict[str, str]:
    root = _root(config)
    sections, _ = gen_config.sections()
    owned: dict[str, list[str]] = {}
    for s in sections:
        if s.feature:
            owned.setdefault(s.feature, []).append(s.name)
    options = {" ".join(c.path): c.options() for c in _commands()}
    pages = {
        "reference/cli.md": gen_cli.page(),
        "reference/config.md": gen_config.page(),
        "reference/trace-schema.md": gen_schema.page(),
        "reference/policies.md": gen_policies.page(root, sections, options),
        f"{gen_features.PAGES}/index.md": gen_features.index(root, owned),
    }
    pages.update({f"{gen_features.PAGES}/{p.name}.md": p.markdown for p in gen_features.pages(root)})
    return pages


def on_files(files: Files, config: Any) -> Files:
    root = _root(config)
    try:
        generated = _generated(config)
    except (gen_config.ConfigDocError, gen_cli.CliDocError, ImportError, OSError) as exc:
        raise PluginError(f"generating the reference pages: {exc}") from exc
    for uri, content in generated.items():
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} exists, but the build generates that page: remove the file")
        files.append(File.generated(config, uri, content=content))
    undocumented = gen_config.undocumented()
    if undocumented:
        log.info("configuration keys without a #: doc: %s", ", ".join(undocumented))
    for page in list(files.documentation_pages()):
        for rel in gen_reports.figures(page.content_string):
            if files.get_file_from_path(rel) is None:
                if not (root / rel).is_file():
                    raise PluginError(f"{page.src_uri}: figure {rel} does not exist")
                files.append(File.generated(config, rel, abs_src_path=str(root / rel)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    uri = page.file.src_uri
    try:
        markdown = gen_reports.expand(markdown, _root(config), uri)
    except gen_reports.ReportError as exc:
        raise PluginError(f"{uri}: {exc}") from exc
    if page.file.generated_by is None:
        errors = gen_cli.check(markdown, _commands())
        if errors:
            raise PluginError(f"{uri}: " + "; ".join(errors))
    return markdown
