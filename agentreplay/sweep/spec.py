"""Sweep specs: a TOML file naming a trace, a base :class:`SimConfig` and the parameters to vary.

Layout::

    [sweep]
    trace = "datasets/swebench-verified"   # relative to the working directory, else to the spec's folder
    seeds = [0, 1]                         # every cell runs once per seed (default: [base seed or 0])
    max_programs = 50                      # optional: workload.max_programs for every cell

    [base]                                 # a SimConfig table, same layout as `agentreplay simulate --config`
    hardware = { gpu = "h100-sxm", model = "llama-3.1-8b" }

    [grid]                                 # dotted config path -> list of values; cartesian product
    "workload.concurrency" = [8, 32]
    "router.policy" = ["round-robin", "least-loaded"]

    [[zip]]                                # parameters that vary together (equal-length lists)
    "hardware.gpu" = ["h100-sxm", "a100-80gb"]
    "hardware.tp" = [1, 2]

A path is any dotted path into the config's TOML layout (``hardware.gpu``, ``tools.scale``, a root key such as
``preset``); each cell's config is the base table with the cell's values set at those paths, built with
:func:`agentreplay.sim.config.from_dict`, so every rule the config enforces applies. Every cell is built while
the spec is expanded: a bad value fails before anything runs, naming the cell and the field.

Guarantees: a cell's ``cell_id`` is a short hash of the canonical JSON of its overrides and seed, so it is stable
across runs, machines and the order of the grid; values of float-typed fields are normalised (``1`` and ``1.0``
are the same cell).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay.sim.config import ConfigError, SimConfig, from_dict, load_toml_as

_SWEEP_KEYS = {"trace", "seeds", "max_programs"}
_TOP_KEYS = {"sweep", "base", "grid", "zip"}
#: results columns a parameter column may not shadow (see agentreplay.sweep.store)
RESERVED_COLUMNS = {"cell_id", "label", "seed", "status", "error", "attempts", "wall_s", "cell_group"}


class SpecError(ValueError):
    """An invalid sweep spec; the message names the key (and the cell, for a bad value)."""


@dataclass(frozen=True, slots=True)
class Param:
    """One swept config path. ``column`` is its results column, ``short`` its name in labels."""

    path: str  #: dotted config path, e.g. ``workload.concurrency``
    column: str  #: results column: the path with dots replaced by underscores
    short: str  #: last path component, or the whole path where two parameters share it
    values: tuple[Any, ...]  #: the values in spec order (normalised)
    kind: str  #: "bool" | "int" | "float" | "str" | "list": the column's type (a list is stored as JSON text)


@dataclass(frozen=True, slots=True, eq=False)
class Cell:
    """One simulation of the sweep: base config + ``overrides`` + ``seed``."""

    cell_id: str  #: 12 hex digits of sha256 over the canonical JSON of overrides and seed
    label: str  #: readable ``short=value`` pairs of the parameters that take more than one value
    seed: int
    overrides: dict[str, Any]  #: dotted path -> value, in parameter order
    config: dict[str, Any]  #: the full config in TOML layout (rebuilt with from_dict in the worker)
    group: str  #: results partition: the first varying parameter's value (``concurrency_8``), or ``all``


@dataclass(frozen=True, slots=True, eq=False)
class SweepSpec:
    trace: Path  #: absolute trace folder
    trace_as_written: str
    seeds: tuple[int, ...]
    base: dict[str, Any]  #: base config in TOML layout (max_programs applied)
    params: tuple[Param, ...]
    cells: tuple[Cell, ...]
    raw: dict[str, Any]  #: the spec as parsed

    @property
    def fingerprint(self) -> str:
        """What must match for a rerun into the same output folder to reuse its results."""
        blob = {"trace": self.trace_as_written, "base": self.base, "params": [(p.path, p.kind) for p in self.params]}
        return _digest(blob, 16)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and expand a spec file; raises :class:`SpecError` naming the file."""
    p = Path(path)
    return load_toml_as(p, lambda data: parse_spec(data, base_dir=p.parent), SpecError)


def parse_spec(data: dict[str, Any], base_dir: str | Path = ".") -> SweepSpec:
    """Validate the spec tables, expand the cells and build every cell's config."""
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise SpecError(f"unknown table(s) {unknown}; known: {sorted(_TOP_KEYS)}")
    sweep = _table(data, "sweep")
    bad = sorted(set(sweep) - _SWEEP_KEYS)
    if bad:
        raise SpecError(f"[sweep] unknown key(s) {bad}; known: {sorted(_SWEEP_KEYS)}")
    if not isinstance(sweep.get("trace"), str):
        raise SpecError('[sweep] trace = "<canonical trace folder>" is required')
    trace = _resolve_trace(sweep["trace"], Path(base_dir))
    base = copy.deepcopy(_table(data, "base"))
    if "max_programs" in sweep:
        base.setdefault("workload", {})["max_programs"] = sweep["max_programs"]
    try:
        base_cfg = from_dict(base)
    except ConfigError as exc:
        raise SpecError(f"[base] {exc}") from None
    seeds = sweep.get("seeds", [base_cfg.seed])
    if not (isinstance(seeds, list) and seeds and all(type(s) is int and s >= 0 for s in seeds)):
        raise SpecError(f"[sweep] seeds = {seeds!r} is invalid: a non-empty list of non-negative integers")
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"[sweep] seeds = {seeds!r} repeats a seed")
    axes = _axes(data)
    params = _params(axes)
    cells = _expand(base, axes, params, seeds)
    return SweepSpec(trace, sweep["trace"], tuple(seeds), base, params, tuple(cells), data)


def _table(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise SpecError(f"[{name}] must be a table, got {value!r}")
    return value


def _resolve_trace(trace: str, base_dir: Path) -> Path:
    candidates = [Path(trace)] if Path(trace).is_absolute() else [Path.cwd() / trace, base_dir / trace]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    raise SpecError(f"[sweep] trace = {trace!r}: no such folder (looked in {', '.join(map(str, candidates))})")


def _flatten(table: dict[str, Any], where: str, prefix: str = "") -> dict[str, list[Any]]:
    """``{"workload": {"concurrency": [..]}}`` and ``{"workload.concurrency": [..]}`` both give the dotted form."""
    out: dict[str, list[Any]] = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, where, f"{path}."))
        elif isinstance(value, list) and value:
            out[path] = value
        else:
            raise SpecError(f"{where} {path} = {value!r}: expected a non-empty list of values")
    return out


Axis = tuple[tuple[str, ...], list[tuple[Any, ...]]]  #: (paths, rows of values): a grid key, or a zip group


def _axes(data: dict[str, Any]) -> list[Axis]:
    """One axis per grid key, one per zip group."""
    axes: list[Axis] = [
        ((path,), [(v,) for v in values]) for path, values in _flatten(_table(data, "grid"), "[grid]").items()
    ]
    zips = data.get("zip", [])
    if not isinstance(zips, list):
        raise SpecError("zip must be an array of tables: [[zip]]")
    for i, group in enumerate(zips):
        lists = _flatten(group, f"[[zip]] #{i + 1}")
        lengths = {k: len(v) for k, v in lists.items()}
        if len(set(lengths.values())) > 1:
            raise SpecError(f"[[zip]] #{i + 1}: lists must have equal lengths, got {lengths}")
        axes.append((tuple(lists), list(zip(*lists.values(), strict=True))))
    seen: set[str] = set()
    for paths, _ in axes:
        for path in paths:
            if path in seen:
                raise SpecError(f"parameter {path!r} is swept twice (grid and/or zip)")
            if path == "seed":
                raise SpecError("sweep seeds with [sweep] seeds = [...], not as a parameter")
            seen.add(path)
    return axes


def _params(axes: list[Axis]) -> tuple[Param, ...]:
    paths = [p for ps, _ in axes for p in ps]
    lasts = [p.rsplit(".", 1)[-1] for p in paths]
    params = []
    for paths_, rows in axes:
        for j, path in enumerate(paths_):
            values = tuple({json.dumps(v): v for v in (_normalise(path, row[j]) for row in rows)}.values())
            column = re.sub(r"\W", "_", path.replace(".", "_"))
            if column in RESERVED_COLUMNS:
                raise SpecError(f"parameter {path!r} would shadow the results column {column!r}")
            last = path.rsplit(".", 1)[-1]
            params.append(Param(path, column, last if lasts.count(last) == 1 else path, values, _kind(path, values)))
    return tuple(params)


def _field_type(path: str) -> Any:
    """The annotated type of a config path (``None`` when the path is not a known dataclass field)."""
    cls: Any = SimConfig
    hint: Any = None
    for part in path.split("."):
        if not dataclasses.is_dataclass(cls):
            return None
        hint = typing.get_type_hints(cls).get(part)
        if hint is None:
            return None
        cls = hint
    return hint


def _is_float_field(path: str) -> bool:
    hint = _field_type(path)
    args = (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        else (hint,)
    )
    return float in args and int not in args


def _normalise(path: str, value: Any) -> Any:
    if type(value) is int and _is_float_field(path):
        return float(value)
    return value


def _kind(path: str, values: tuple[Any, ...]) -> str:
    if all(type(v) is bool for v in values):
        return "bool"
    if all(type(v) is int for v in values):
        return "int"
    if all(type(v) in (int, float) for v in values):
        return "float"
    if all(isinstance(v, str) for v in values):
        return "str"
    if all(isinstance(v, list) for v in values):
        return "list"
    raise SpecError(f"parameter {path!r}: values {list(values)!r} mix types (or are tables); use one type")


def _digest(obj: Any, n: int) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def fmt(value: Any) -> str:
    """A value as written in labels and partition names."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ",".join(map(fmt, value))
    return str(value)


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{path}: {part!r} is not a table in the config")
    node[leaf] = value


def _expand(base: dict[str, Any], axes: list[Axis], params: tuple[Param, ...], seeds: list[int]) -> list[Cell]:
    combos = list(itertools.product(*(rows for _, rows in axes)))
    paths = [p.path for p in params]
    split = next((p for p in params if len(p.values) > 1), params[0] if params else None)  # the partition key
    total = len(combos) * len(seeds)
    cells: list[Cell] = []
    ids: dict[str, str] = {}
    for combo in combos:
        values = [v for row in combo for v in row]
        overrides = {path: _normalise(path, v) for path, v in zip(paths, values, strict=True)}
        for seed in seeds:
            cell_id = _digest({"overrides": overrides, "seed": seed}, 12)
            pairs = [f"{p.short}={fmt(overrides[p.path])}" for p in params if len(p.values) > 1]
            label = " ".join(pairs + ([f"seed={seed}"] if len(seeds) > 1 else [])) or "base"
            config = copy.deepcopy(base)
            try:
                for path, v in overrides.items():
                    _set(config, path, v)
                config["seed"] = seed
                from_dict(config)
                _check_catalog(config)
            except ValueError as exc:  # ConfigError, or an unknown catalog name
                raise SpecError(f"cell {len(cells) + 1}/{total} {cell_id} ({label}): {exc}") from None
            if cell_id in ids:
                raise SpecError(f"cells {ids[cell_id]!r} and {label!r} are the same cell")
            ids[cell_id] = label
            group = f"{split.short}_{fmt(overrides[split.path])}" if split else "all"
            cells.append(Cell(cell_id, label, seed, overrides, config, re.sub(r"[^\w.+-]", "_", group)))
    return cells


def _check_catalog(config: dict[str, Any]) -> None:
    """Unknown GPU / model names and a TP that does not divide the model are bad values, not run failures.
    (Whether the model fits, or the trace fits the KV cache, is decided when the cell runs.)"""
    from agentreplay.perf import load_gpu, load_model

    hw = from_dict(config).hardware
    load_gpu(hw.gpu)
    load_model(hw.model).validate_tp(hw.tp)
