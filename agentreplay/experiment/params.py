"""An experiment's ``Params`` as command-line options: one option per field, parsed from text by the field's type.

Types a field may have (and how its option is written):

- ``bool``: a flag pair, ``--name/--no-name``;
- ``int``, ``float``, ``str``, a ``Literal`` of strings (the choices are checked and listed), each optionally
  ``| None``;
- ``tuple[X, ...]`` of one of those (``X | None`` spelled ``none``): comma-separated, the option repeatable
  (``--loads 4,64`` is ``--loads 4 --loads 64``);
- ``Mapping[str, float]``: ``NAME=NUMBER`` pairs, comma-separated.

A value that does not parse is a :class:`ParamError` naming the option and the value; the field's own checks
(the dataclass's ``__post_init__``) run when the Params are built.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: the scalar kinds a field may hold
SCALARS = {int: "int", float: "float", str: "str"}


class ParamError(ValueError):
    """A value that cannot be an experiment's parameter; the message names the option and the value."""


@dataclass(frozen=True, slots=True)
class Spec:
    """One field of a ``Params`` dataclass as an option."""

    name: str  #: the field name
    flag: str  #: ``--field-name``
    shape: str  #: "scalar" | "tuple" | "map" | "flag"
    kind: str  #: "int" | "float" | "str" | "bool": the type of the value (of each item for a tuple or map)
    optional: bool  #: None allowed (the whole value; for a tuple: each item, spelled ``none``)
    choices: tuple[str, ...]  #: a Literal's values (empty: any)
    default: Any
    doc: str
    none: str | None  #: what a None default means, for the help

    @property
    def metavar(self) -> str:
        one = "|".join(self.choices) if self.choices else self.kind.upper()
        if self.shape == "tuple":
            return f"{one},..."
        return "NAME=NUMBER,..." if self.shape == "map" else one

    def help(self) -> str:
        """The doc, the choices when there are some, and the default."""
        text = self.doc.rstrip()
        if self.choices:
            text += f" One of: {', '.join(self.choices)}."
        if self.shape == "flag":
            shown = "on" if self.default else "off"
        else:
            shown = self.none if self.default is None and self.none else show(self, self.default)
        return f"{text} Default: {shown}."


def _strip_none(hint: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(hint, False)``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _scalar(hint: Any, where: str) -> tuple[str, tuple[str, ...]]:
    if typing.get_origin(hint) is Literal:
        values = typing.get_args(hint)
        if not all(isinstance(v, str) for v in values):
            raise TypeError(f"{where}: a Literal of strings only")
        return "str", tuple(values)
    if hint in SCALARS:
        return SCALARS[hint], ()
    raise TypeError(f"{where}: type {hint!r} is not one an option can take (int, float, str, a Literal, bool)")


def spec_of(f: dataclasses.Field[Any], hint: Any, owner: str) -> Spec:
    """The option of field ``f`` (annotated ``hint``) of the dataclass ``owner``."""
    where = f"{owner}.{f.name}"
    doc, none = f.metadata.get("doc"), f.metadata.get("none")
    if not doc:
        raise TypeError(f"{where}: no doc (make the field with agentreplay.experiment.param)")
    flag = "--" + f.name.replace("_", "-")
    inner, optional = _strip_none(hint)
    origin = typing.get_origin(inner)
    if inner is bool:
        return Spec(f.name, flag, "flag", "bool", optional, (), f.default, doc, none)
    if origin is tuple:
        args = typing.get_args(inner)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{where}: a tuple option is tuple[X, ...]")
        item, item_none = _strip_none(args[0])
        kind, choices = _scalar(item, where)
        return Spec(f.name, flag, "tuple", kind, item_none, choices, f.default, doc, none)
    if origin in (dict, Mapping):
        if typing.get_args(inner) != (str, float):
            raise TypeError(f"{where}: a mapping option is Mapping[str, float]")
        return Spec(f.name, flag, "map", "float", optional, (), f.default, doc, none)
    kind, choices = _scalar(inner, where)
    return Spec(f.name, flag, "scalar", kind, optional, choices, f.default, doc, none)


def specs(params: type[Any]) -> list[Spec]:
    """One :class:`Spec` per field of the ``Params`` dataclass, in field order."""
    if not dataclasses.is_dataclass(params):
        raise TypeError(f"{params!r} is not a dataclass")
    hints = typing.get_type_hints(params)
    return [spec_of(f, hints[f.name], params.__name__) for f in dataclasses.fields(params)]


def _item(spec: Spec, text: str) -> Any:
    t = text.strip()
    many = spec.shape == "tuple"
    if spec.optional and many and t.lower() in ("none", "off"):
        return None
    try:
        value: Any = int(t) if spec.kind == "int" else float(t) if spec.kind == "float" else t
    except ValueError:
        what = "an integer" if spec.kind == "int" else "a number"
        orn = " or 'none'" if spec.optional else ""
        raise ParamError(f"{spec.flag}{' item' if many else ''} {t!r}: {what}{orn}") from None
    if spec.choices and value not in spec.choices:
        raise ParamError(f"{spec.flag} {t!r}: one of {', '.join(spec.choices)}")
    return value


def check(ok: bool, flag: str, value: Any, rule: str) -> None:
    """A ``Params`` check: :class:`ParamError` ``FLAG VALUE: RULE`` unless ``ok``."""
    if not ok:
        raise ParamError(f"{flag} {value!r}: {rule}")


def parse(spec: Spec, given: str | list[str] | tuple[str, ...] | bool) -> Any:
    """The value of ``spec`` from the command line's text (a list for a repeatable option, a bool for a flag)."""
    if spec.shape == "flag":
        return bool(given)
    texts = [given] if isinstance(given, str) else list(given)  # type: ignore[arg-type]
    if spec.shape == "scalar":
        (text,) = texts[-1:] or [""]
        if spec.optional and text.strip().lower() == "none":
            return None
        return _item(spec, text)
    items = [x for t in texts for x in str(t).split(",") if x.strip()]
    if not items:
        raise ParamError(f"{spec.flag} {','.join(map(str, texts))!r}: give at least one value")
    if spec.shape == "tuple":
        return tuple(_item(spec, x) for x in items)
    out: dict[str, float] = {}
    for pair in items:
        key, eq, number = pair.partition("=")
        try:
            if not eq or not key.strip():
                raise ValueError
            out[key.strip()] = float(number)
        except ValueError:
            raise ParamError(
                f"{spec.flag} {pair.strip()!r}: expected NAME=NUMBER pairs, e.g. interactive=600"
            ) from None
    return out


def show(spec: Spec, value: Any) -> str:
    """``value`` as the command line writes it (the inverse of :func:`parse`)."""
    if value is None:
        return "none"
    if spec.shape == "flag":
        return spec.flag if value else "--no-" + spec.flag[2:]
    if spec.shape == "tuple":
        return ",".join("none" if v is None else f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    if spec.shape == "map":
        return ",".join(f"{k}={v:g}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def build(params: type[Any], given: dict[str, Any]) -> Any:
    """``params`` from the options that were given (field name -> text, list of texts or flag; None: not given,
    the field's default); its own checks run here (their ValueError names the option)."""
    values = {s.name: parse(s, given[s.name]) for s in specs(params) if given.get(s.name) is not None}
    return params(**values)


def command_line(params: Any, name: str) -> str:
    """``agentreplay fleet NAME --opt value ...`` for the fields of ``params`` that differ from their defaults."""
    parts = [f"agentreplay fleet {name}"]
    for s in specs(type(params)):
        value = getattr(params, s.name)
        if value == s.default:
            continue
        parts.append(show(s, value) if s.shape == "flag" else f"{s.flag} {show(s, value)}")
    return " ".join(parts)
