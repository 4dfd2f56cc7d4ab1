"""The policy reference (``reference/policies.md``), generated from the policy registries and the presets.

The registries are found, not listed: every module of ``agentreplay`` that assigns a
:class:`agentreplay.policy.registry.Registry` at module level (``NAME = Registry(`` / ``NAME: Registry[...] =
Registry(``) is imported and its registry read, so a new axis appears here without touching the docs. For each
policy: its name, summary, class and docstring, and its parameters (type, default, doc), which are read from the
configuration fields of the same names. The presets come from :data:`agentreplay.policy.presets.PRESETS`.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

import gen_md as md

_ASSIGN = re.compile(r"^([A-Z][A-Z0-9_]*)\s*(?::[^=\n]*)?=\s*Registry\(", re.M)
#: the order a call meets the axes (front end, router, then the instance); an axis not named here comes after
ORDER = ("admission", "router", "queue", "victim", "retention")


def registries(root: Path) -> list[Any]:
    """Every module-level registry of the ``agentreplay`` package, in :data:`ORDER`."""
    from agentreplay.policy.registry import Registry

    found = []
    for path in sorted((root / "agentreplay").rglob("*.py")):
        names = _ASSIGN.findall(path.read_text())
        if not names:
            continue
        module = importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
        found += [obj for n in names if isinstance(obj := getattr(module, n, None), Registry)]
    return sorted(found, key=lambda r: (ORDER.index(r.axis) if r.axis in ORDER else len(ORDER), r.axis))


def _config_fields(config_sections: list[Any]) -> dict[str, tuple[str, dataclasses.Field[Any], str]]:
    """Every configuration key by name: ``(section, field, doc)`` (the first section holding it)."""
    out: dict[str, tuple[str, dataclasses.Field[Any], str]] = {}
    for s in config_sections:
        docs = md.field_docs(s.cls)
        for f in dataclasses.fields(s.cls):
            out.setdefault(f.name, (s.name, f, docs.get(f.name, "")))
    return out


def _set_by(registry: Any, config_sections: list[Any]) -> list[str]:
    """``[section] key`` of the string keys whose default names a policy of ``registry``: where it is chosen."""
    out = []
    for s in config_sections:
        for f in dataclasses.fields(s.cls):
            if isinstance(f.default, str) and f.default in registry:
                out.append(f"[`[{s.name}] {f.name}`](config.md#{s.name})")
    return out


def _params(entry: Any, keys: dict[str, tuple[str, dataclasses.Field[Any], str]]) -> str:
    fields = dataclasses.fields(entry.params)
    if not fields:
        return "No parameters.\n"
    docs, types = md.field_docs(entry.params), md.field_types(entry.params)
    rows = []
    for f in fields:
        section = keys.get(f.name)
        doc = docs.get(f.name) or (section[2] if section else "")
        key = f"[{md.code(f'[{section[0]}] {f.name}')}](config.md#{section[0]})" if section else md.code(f.name)
        rows.append([key, md.code(types[f.name]), md.code(md.toml_value(md.default_of(f))), md.cell(doc)])
    return md.table(["configuration key", "type", "default", "meaning"], rows)


def _axis(registry: Any, option: str | None, config_sections: list[Any]) -> list[str]:
    keys = _config_fields(config_sections)
    where = _set_by(registry, config_sections)
    chosen = ", ".join([*([md.code(option)] if option else []), *where]) or "its registry only"
    parts = [
        f"## {registry.axis}\n",
        f"Chosen by {chosen}. Policies: " + ", ".join(f"[`{n}`](#{registry.axis}-{n})" for n in registry) + ".\n",
        md.table(["policy", "summary"], [[md.code(e.name), md.cell(e.summary)] for e in registry.entries()]),
    ]
    for e in registry.entries():
        kind = "Class" if isinstance(e.cls, type) else "Built by"
        parts += [
            f"### {e.name} {{#{registry.axis}-{e.name}}}\n",
            f"{md.cell(e.summary)}. {kind} {md.code(f'{e.cls.__module__}.{e.cls.__qualname__}')}.\n",
            md.prose(md.doc_of(e.cls)),
            _params(e, keys),
        ]
    return parts


def _presets() -> list[str]:
    from agentreplay.policy import presets

    keys = sorted({(s, k) for p in presets.PRESETS.values() for s, fields in p.items() for k in fields})
    rows = [
        [md.code(name), *(md.code(p.get(s, {}).get(k, "")) if k in p.get(s, {}) else "" for s, k in keys)]
        for name, p in presets.PRESETS.items()
    ]
    return [
        "## Presets\n",
        "`--preset NAME` applies one of these bundles (one policy per axis, matching a published system) over the "
        "configuration; everything else stays as configured.\n",
        md.table(["preset", *(md.code(f"[{s}] {k}") for s, k in keys)], rows),
        md.prose(md.module_doc(presets.__name__)),
    ]


def page(root: Path, config_sections: list[Any], cli_options: dict[str, set[str]]) -> str:
    """The whole policy reference page. ``cli_options``: each CLI command's option names (an axis's option is
    ``--AXIS`` where ``simulate`` has it)."""
    parts = [
        "# Policy reference\n",
        "Generated at build time from the policy registries (every `Registry` in the package) and the presets: "
        "every policy of every axis, its class, sources (in its docstring) and parameters. A policy's "
        "parameters are read from the configuration keys of the same names (one key may serve several "
        "policies); the [configuration reference](config.md) has every key.\n",
        "How to add a policy: [Add a policy](../how-to/add-a-policy.md).\n",
    ]
    simulate = cli_options.get("simulate", set())
    for reg in registries(root):
        option = f"--{reg.axis}" if f"--{reg.axis}" in simulate else None
        parts += _axis(reg, option, config_sections)
    parts += _presets()
    return "\n".join(parts)
