"""One name-keyed registry per policy axis (router, admission, queue order, preemption victim, retention).

An axis module (e.g. :mod:`agentreplay.scheduler.queue`) holds the axis's ``Protocol``, one small class per
policy, one frozen parameter dataclass per policy (:class:`NoParams` when it has none) and a :class:`Registry`
listing them. Everything else reads the registry: the configuration checks names against it and builds each
policy's parameters from the fields of its section (:meth:`Registry.check`, :meth:`Registry.params`), the CLI
lists its names and summaries (:meth:`Registry.choices`), ``agentreplay.sim.run`` builds the policy
(:meth:`Registry.build`), and the tests run every registered name.

Parameters keep their configuration names: a parameter dataclass's field ``ttl_s`` is read from the field
``ttl_s`` of the axis's configuration section (``[policy]``), so TOML files keep working and one field may serve
several policies (``load_metric``). A parameter dataclass validates its values in ``__post_init__`` by raising
:class:`ParamError`, which the configuration reports with its section.

Adding a policy: its class, its parameter dataclass and one :class:`Entry` in the axis module, plus its
parameter fields (with the same defaults) in the configuration section; ``tests/test_registries.py`` fails
naming whatever is missing.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ParamError(ValueError):
    """A policy parameter out of range: ``field``, ``value`` and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        super().__init__(f"{field} = {value!r} is invalid: {allowed}")
        self.field, self.value, self.allowed = field, value, allowed


def check(cond: bool, field: str, value: Any, allowed: str) -> None:
    """Raise :class:`ParamError` unless ``cond``."""
    if not cond:
        raise ParamError(field, value, allowed)


def close_names(name: object, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names a mistyped ``name`` may have meant, best first (at most ``n``): those it begins, when any
    (``h100`` -> ``h100-sxm``, not ``h200``), else :func:`difflib.get_close_matches`; [] for a non-string."""
    if not isinstance(name, str) or not name:
        return []
    names = list(known)
    extended = [k for k in names if k.lower().startswith(name.lower()) and k != name]
    return extended[:n] or difflib.get_close_matches(name, names, n=n)


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'a' or 'b'?)`` for an unknown ``name`` (the two best :func:`close_names`), or "" when
    none is close."""
    close = close_names(name, known, n=2)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


@dataclass(frozen=True, slots=True)
class NoParams:
    """The parameters of a policy that has none."""


@dataclass(frozen=True, slots=True)
class Entry(Generic[T]):
    """One registered policy: its configuration name, its class (built as ``cls(params, *deps)``, ``deps`` being
    what the axis gives every policy), its parameter dataclass and a one-line summary for help texts."""

    name: str
    cls: Callable[..., T]
    params: type
    summary: str


class Registry(Generic[T]):
    """The policies of one axis, by name, in registration order (the order help texts list them)."""

    def __init__(self, axis: str, entries: Sequence[Entry[T]]) -> None:
        self.axis = axis
        self._entries = {e.name: e for e in entries}
        if len(self._entries) != len(entries):
            raise ValueError(f"{axis}: duplicate policy names in {[e.name for e in entries]}")

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entry(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.axis} policy {name!r}{did_you_mean(name, self._entries)}; known: "
                f"{', '.join(self._entries)}"
            ) from None

    def entries(self) -> tuple[Entry[T], ...]:
        return tuple(self._entries.values())

    def param_fields(self) -> dict[str, dataclasses.Field]:
        """Every parameter field of every policy of the axis, by name (one field may serve several)."""
        out: dict[str, dataclasses.Field] = {}
        for e in self._entries.values():
            for f in dataclasses.fields(e.params):
                out.setdefault(f.name, f)
        return out

    def params(self, name: str, section: Any) -> Any:
        """Policy ``name``'s parameters, each read from the attribute of the same name of ``section`` (a
        configuration dataclass); raises :class:`ParamError` for a value out of range."""
        cls = self.entry(name).params
        return cls(**{f.name: getattr(section, f.name) for f in dataclasses.fields(cls)})

    def check(self, section: Any) -> None:
        """Build every policy's parameters from ``section``: each value is validated by its parameter class."""
        for name in self._entries:
            self.params(name, section)

    def build(self, name: str, section: Any, *deps: Any) -> T:
        """Policy ``name`` with its parameters from ``section`` and the axis's dependencies ``deps``."""
        return self.entry(name).cls(self.params(name, section), *deps)

    def choices(self) -> str:
        """``a | b | c``: the names, for help texts."""
        return " | ".join(self._entries)
