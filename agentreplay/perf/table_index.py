"""What a ``tables.toml`` holds, without its points: per table key (``gpu/model/tpN``) the GPU, model, TP and dtype
and where it was measured (:class:`~agentreplay.perf.loaders.TableOrigin`), all that ``auto``
(:func:`agentreplay.perf.registry.choose_pricer`) reads to pick a pricer.

The writer of ``tables.toml`` (``validation/calibration/write.py``) writes this index beside it as
``tables_index.json`` (:data:`INDEX`), with the SHA-256 of the ``tables.toml`` bytes it was made from, so that a
run's start decides without parsing every table's points. :func:`table_entries` uses an index only when that digest
is the file's: with no index, or one left over from other tables (``tables.toml`` rewritten without it), the
entries are read from ``tables.toml`` itself (:func:`parse_entries`), so an index changes how fast the choice is
made, never which it is. A malformed index raises ValueError naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from agentreplay.perf.loaders import TableOrigin, load_table_origins, load_tables

#: The index's file name, beside the ``tables.toml`` it indexes.
INDEX: Final = "tables_index.json"
#: Version of the index layout (:func:`index_text`); an index of another version is refused.
SCHEMA_VERSION: Final = 1
#: Per entry: the fields of :class:`TableEntry` and of its origin, with their JSON types.
_FIELDS: Final[dict[str, tuple[type, ...]]] = {
    "gpu": (str,),
    "model": (str,),
    "tp": (int,),
    "dtype": (str,),
    "source": (str,),
    "engine": (str, type(None)),
    "engine_version": (str, type(None)),
    "kv_dtype": (str, type(None)),
}


@dataclass(frozen=True, slots=True)
class TableEntry:
    """One table of a ``tables.toml`` as ``auto`` reads it: its deployment and where it was measured."""

    gpu: str
    model: str
    tp: int
    dtype: str  #: the table's weight dtype (``bf16`` / ``fp8``)
    origin: TableOrigin  #: key, source cell and (deployment profiles) engine, engine version, KV dtype


def index_path(tables: str | Path) -> Path:
    """Where the index of the ``tables.toml`` at ``tables`` lives: beside it (:data:`INDEX`)."""
    return Path(tables).with_name(INDEX)


def digest(data: bytes) -> str:
    """SHA-256 (hex) of a ``tables.toml``'s bytes, as an index records it."""
    return hashlib.sha256(data).hexdigest()


def parse_entries(tables: str | Path) -> dict[str, TableEntry]:
    """The entries of the ``tables.toml`` at ``tables``, from the file itself (every table parsed:
    :func:`agentreplay.perf.loaders.load_tables`); {} when there is no such file."""
    origins = load_table_origins(tables)
    return {
        key: TableEntry(t.gpu, t.model, t.tp, t.dtype, origins[key]) for key, t in sorted(load_tables(tables).items())
    }


def index_text(entries: Mapping[str, TableEntry], tables_bytes: bytes) -> str:
    """The index (JSON text) of ``entries``, those of the ``tables.toml`` whose bytes are ``tables_bytes``."""
    body = {
        key: {
            "gpu": e.gpu,
            "model": e.model,
            "tp": e.tp,
            "dtype": e.dtype,
            "source": e.origin.source,
            "engine": e.origin.engine,
            "engine_version": e.origin.engine_version,
            "kv_dtype": e.origin.kv_dtype,
        }
        for key, e in sorted(entries.items())
    }
    doc = {"schema_version": SCHEMA_VERSION, "tables_sha256": digest(tables_bytes), "tables": body}
    return json.dumps(doc, indent=1) + "\n"


def _entry(where: str, key: str, raw: Any) -> TableEntry:
    """The :class:`TableEntry` of ``tables.<key>`` of the index at ``where``; ValueError naming a bad field."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: tables.{key}: expected an object, got {raw!r}")
    for name, types in _FIELDS.items():
        if name not in raw:
            raise ValueError(f"{where}: tables.{key}: field {name!r} is missing")
        if not isinstance(raw[name], types) or isinstance(raw[name], bool):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise ValueError(f"{where}: tables.{key}.{name} = {raw[name]!r}: expected {want}")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{where}: tables.{key}: unknown field(s) {unknown}")
    given = [f for f in ("engine", "engine_version", "kv_dtype") if raw[f] is not None]
    if given and len(given) != 3:
        raise ValueError(f"{where}: tables.{key}: engine, engine_version and kv_dtype go together, got {given}")
    origin = TableOrigin(key, raw["source"], raw["engine"], raw["engine_version"], raw["kv_dtype"])
    return TableEntry(raw["gpu"], raw["model"], raw["tp"], raw["dtype"], origin)


def read_index(tables: str | Path) -> dict[str, TableEntry] | None:
    """The entries the index beside the ``tables.toml`` at ``tables`` records, or None when it cannot stand for
    that file: no index, no ``tables.toml``, or an index made from other bytes (``tables_sha256``). ValueError,
    naming the file and the field, for an index that is not one."""
    path = index_path(tables)
    if not path.is_file() or not Path(tables).is_file():
        return None
    where = str(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: not a tables index (JSON): {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        got = doc.get("schema_version") if isinstance(doc, dict) else doc
        raise ValueError(f"{where}: schema_version = {got!r}: expected {SCHEMA_VERSION}")
    if not isinstance(doc.get("tables_sha256"), str) or not isinstance(doc.get("tables"), dict):
        raise ValueError(f"{where}: needs tables_sha256 (a string) and tables (an object)")
    if doc["tables_sha256"] != digest(Path(tables).read_bytes()):
        return None
    return {str(key): _entry(where, str(key), raw) for key, raw in doc["tables"].items()}


def table_entries(tables: str | Path) -> dict[str, TableEntry]:
    """The entries of the ``tables.toml`` at ``tables``: from its index when that stands for the file
    (:func:`read_index`), else parsed from the file (:func:`parse_entries`); the same either way."""
    indexed = read_index(tables)
    return indexed if indexed is not None else parse_entries(tables)
