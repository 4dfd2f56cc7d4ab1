"""The configuration reference (``reference/config.md``), generated from the configuration dataclasses.

Sections come from two public places: the fields of :class:`agentreplay.sim.config.SimConfig` (the core sections
and the root key ``seed``) and the features' declarations (:func:`agentreplay.features.registry.features`, whose
``config`` reference names the dataclass of the section the feature owns). A section a feature declares is
documented with that feature, not with the core. For each key: its type, its default and its ``#:`` doc.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gen_md as md


class ConfigDocError(RuntimeError):
    """A feature's configuration reference that the docs cannot read (names the feature and the reference)."""


@dataclass(frozen=True)
class Section:
    """One ``[name]`` table of a TOML config: its dataclass and the feature that owns it (None: the core)."""

    name: str
    cls: type
    feature: str | None = None


def _feature_sections(feature: Any) -> list[Section]:
    """The sections a feature's ``config`` reference declares: a mapping ``section name -> dataclass`` (what
    ``agentreplay.features.base.Feature`` documents), each name one of the feature's declared sections."""
    from agentreplay.features import load

    try:
        obj = load(feature.config)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigDocError(
            f"feature {feature.name!r}: its config reference {feature.config!r} does not load: {exc}"
        ) from exc
    if not isinstance(obj, Mapping):
        raise ConfigDocError(
            f"feature {feature.name!r}: config {feature.config!r} is {obj!r}, not a mapping section -> dataclass"
        )
    declared = set(getattr(feature, "sections", ()) or ())
    out = []
    for name, cls in obj.items():
        if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
            raise ConfigDocError(f"feature {feature.name!r}: section {name!r} -> {cls!r} is not a dataclass")
        if declared and name not in declared:
            raise ConfigDocError(
                f"feature {feature.name!r}: its config names section {name!r}, which the feature does not declare "
                f"(sections={sorted(declared)})"
            )
        out.append(Section(str(name), cls, feature.name))
    return out


def sections() -> tuple[list[Section], list[tuple[str, dataclasses.Field[Any]]]]:
    """``(sections, root keys)``: the core sections in :class:`SimConfig` order, then the features' in registry
    order; the root keys are SimConfig's fields that are not sections (``seed``)."""
    from agentreplay.features import features
    from agentreplay.sim.config import SimConfig

    owned = [s for f in features() if f.config for s in _feature_sections(f)]
    claimed = {s.name for s in owned}
    core, root = [], []
    for f in dataclasses.fields(SimConfig):
        default = md.default_of(f)
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            if f.name not in claimed:
                core.append(Section(f.name, type(default)))
        elif f.name not in claimed:
            root.append((f.name, f))
    return core + owned, root


def _section_table(cls: type) -> str:
    docs, types = md.field_docs(cls), md.field_types(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = md.default_of(f)
        shown = "required" if default is dataclasses.MISSING else md.code(md.toml_value(default))
        rows.append([md.code(f.name), md.code(types[f.name]), shown, md.cell(docs.get(f.name, ""))])
    return md.table(["key", "type", "default", "meaning"], rows)


def undocumented() -> list[str]:
    """``[section] key`` of every key without a ``#:`` doc (the page shows them with an empty meaning)."""
    secs, _ = sections()
    out = []
    for s in secs:
        docs = md.field_docs(s.cls)
        out += [f"[{s.name}] {f.name}" for f in dataclasses.fields(s.cls) if f.name not in docs]
    return out


def page() -> str:
    """The whole configuration reference page."""
    from agentreplay.sim.config import SimConfig

    secs, root = sections()
    parts = [
        "# Configuration reference\n",
        "Generated at build time from the configuration dataclasses (`agentreplay/sim/config.py` and each "
        "feature's `config` module); nothing on this page is typed by hand.\n",
        "A simulation config is a TOML file given to `agentreplay simulate --config FILE` (options given on the "
        "command line override it). Root keys go at the top of the file, then one `[section]` table per "
        "section; every key is optional and a key left out keeps the default below. Tuples and lists are TOML "
        "arrays, dicts inline tables; `unset` means the key is left out (TOML has no null). Every value is "
        "checked when the config is built: a bad one fails naming the section, key, value and what is allowed. "
        "`simulate` writes the resolved config beside its results as `config.toml`.\n",
        "## Root keys\n",
    ]
    docs, types = md.field_docs(SimConfig), md.field_types(SimConfig)
    parts.append(
        md.table(
            ["key", "type", "default", "meaning"],
            [
                [md.code(n), md.code(types[n]), md.code(md.toml_value(md.default_of(f))), md.cell(docs.get(n, ""))]
                for n, f in root
            ],
        )
    )
    parts.append("## Core sections\n")
    for s in (s for s in secs if s.feature is None):
        parts += [f"### `[{s.name}]`\n", md.prose(md.doc_of(s.cls)), _section_table(s.cls)]
    parts.append("## Feature sections\n")
    parts.append("Each is owned by one feature (its page says what it models and how to use it); off by default.\n")
    for s in secs:
        if s.feature is None:
            continue
        link = f"[{s.feature}](../how-to/features/{s.feature}.md)" if _has_page(s.feature) else f"`{s.feature}`"
        parts += [
            f"### `[{s.name}]`\n",
            f"Feature: {link}.\n",
            md.prose(md.doc_of(s.cls)),
            _section_table(s.cls),
        ]
    return "\n".join(parts)


def _has_page(feature: str) -> bool:
    from agentreplay.features import feature as lookup

    return lookup(feature).doc.is_file()
