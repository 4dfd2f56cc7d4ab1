"""Option values converted without pydantic wherever that changes nothing.

typer (0.2x) converts every option value through a pydantic ``TypeAdapter``, built when the option is first
processed, even for an option left unset (its value stays None): the first option parsed imports pydantic, most
of what ``agentreplay CMD --help`` and a small run spend beyond their own imports. :class:`PlainCommand` and
:class:`PlainGroup`, the click classes of every agentreplay command and group, give each parameter a conversion
(:class:`PlainValue`) that does the plain cases itself:

- an unset value (None, or an empty tuple for a repeatable option), as typer returns it;
- a ``str``, as typer's (the string itself);
- an ``int`` or ``float`` without bounds, written in plain decimal (:data:`INT`, :data:`FLOAT`: what Python and
  pydantic read alike), or a default of that type;
- a ``Path`` (given, or a default) without a ``path_type``, then typer's own checks of the path (exists, file /
  directory, readable);
- a list of those (a repeatable option, or an argument taking several values), as a list.

Any other value or parameter (a choice, bounds, a parser, a file, a string these patterns refuse) goes to typer's
own conversion, so every value and every error message is typer's. With a typer without this conversion layer
(before 0.2x, or a later rewrite), nothing is changed: typer converts as it always does.
``tests/cli/test_coerce.py`` checks the two agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, get_args, get_origin

from typer.core import TyperCommand, TyperGroup

try:  # typer's conversion layer (typer 0.2x; private): without it, typer converts as it always does
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path
except ImportError:  # pragma: no cover - an older or newer typer
    RuntimeParam = None  # type: ignore[assignment,misc]

#: decimal integers and floats as written on a command line, which ``int`` / ``float`` and pydantic's lax mode
#: read alike (no spaces, underscores, ``inf`` or ``nan``: those go to typer)
INT = re.compile(r"[+-]?[0-9]+")
FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class NotPlain(Exception):
    """A value :class:`PlainValue` leaves to typer's conversion."""


def _integer(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    if type(value) is int:  # a default
        return value
    if isinstance(value, str) and INT.fullmatch(value):
        return int(value)
    raise NotPlain


def _real(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    if type(value) in (int, float):  # a default
        return float(value)
    if isinstance(value, str) and FLOAT.fullmatch(value):
        return float(value)
    raise NotPlain


def _text(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    if not isinstance(value, str):
        raise NotPlain
    return value


def _path(value: Any, info: Any, param: Any, ctx: Any) -> Any:
    """A path, checked by typer's own path checks (exists, file / directory, readable, as the option says)."""
    if isinstance(value, str) and value:
        value = Path(value)
    if not isinstance(value, Path):
        raise NotPlain
    return coerce_cli_path(value, info, path_type=Path, param=param, ctx=ctx)


#: the converters of the plain types, each ``(value, parameter_info, param, ctx) -> value``
LEAVES: dict[Any, Callable[[Any, Any, Any, Any], Any]] = {
    str: _text,
    int: _integer,
    float: _real,
    Path: _path,
}


def leaf(descriptor: Any) -> tuple[Callable[[Any, Any, Any, Any], Any] | None, bool]:
    """The plain converter of a parameter (None: typer converts every value given) and whether it takes a list."""
    info, annotation = descriptor.parameter_info, descriptor.annotation
    constrained = (
        descriptor.file_annotation is not None
        or descriptor.is_choice
        or info.parser is not None
        or getattr(info, "click_type", None) is not None
        or info.min is not None
        or info.max is not None
        or getattr(info, "path_type", None) is not None
    )
    many = get_origin(annotation) is list
    if many:
        (annotation,) = get_args(annotation) or (None,)
    return (None if constrained else LEAVES.get(annotation)), many


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class PlainValue(RuntimeParam):
        """typer's conversion of one parameter, without pydantic for the plain values (module docstring)."""

        descriptor: Any = None

        @cached_property
        def converter(self) -> tuple[Callable[[Any, Any, Any, Any], Any] | None, bool]:
            """The plain converter (:func:`leaf`) and whether the parameter takes a list."""
            return leaf(self.descriptor)

        @cached_property
        def typer_value(self) -> Any:
            """typer's own conversion of the parameter (imports pydantic), built when first needed."""
            return build_runtime_param(self.descriptor)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            convert, many = self.converter
            try:
                if convert is None:
                    raise NotPlain
                if many:
                    if not isinstance(value, list | tuple):
                        raise NotPlain
                    return [convert(v, self.parameter_info, param, ctx) for v in value]
                return convert(value, self.parameter_info, param, ctx)
            except NotPlain:
                return self.typer_value._coerce_value(value, param=param, ctx=ctx)


def plain(params: list[Any]) -> list[Any]:
    """``params`` with :class:`PlainValue` as the conversion of each typer parameter not converted yet."""
    if RuntimeParam is None:
        return params
    for p in params:
        descriptor = getattr(p, "type_descriptor", None)
        if descriptor is not None and getattr(p, "_runtime_param", False) is None:
            p._runtime_param = PlainValue(
                parameter_info=descriptor.parameter_info, annotation=descriptor.annotation, descriptor=descriptor
            )
    return params


class PlainCommand(TyperCommand):
    """A typer command whose parameters convert plain values without pydantic (module docstring)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return plain(super().get_params(ctx))


class PlainGroup(TyperGroup):
    """A typer group whose parameters (its ``--help``) convert plain values without pydantic."""

    def get_params(self, ctx: Any) -> list[Any]:
        return plain(super().get_params(ctx))
