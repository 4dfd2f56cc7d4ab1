"""What a command group is: a typer sub-app listed as one panel of ``agentreplay --help``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import typer
from typer.models import CommandInfo

from agentreplay.cli.coerce import PlainCommand, PlainGroup

F = TypeVar("F", bound=Callable[..., Any])


def command_name(info: CommandInfo) -> str:
    """The name a registered command is run by (typer's default: the function's name, ``_`` as ``-``)."""
    return info.name or info.callback.__name__.lower().replace("_", "-")  # type: ignore[union-attr]


class Group(typer.Typer):
    """The commands of one job (trace, simulate, validate, fleet, drive), listed in one rich help panel.

    ``modules``: each of the group's commands -> the module of :mod:`agentreplay.cli` that defines it, whose
    ``@group.command()`` decorators register it here when it is imported (so ``agentreplay CMD`` imports CMD's
    module only: :func:`agentreplay.cli.app.main`). A group without a ``name`` is merged into the top level (its
    commands run as ``agentreplay CMD``), each command in the group's ``panel``, in the order of ``modules``
    whichever module is imported first. A named group (``fleet``) is one entry of its panel and its commands run
    below it (``agentreplay fleet NAME``); ``modules`` then maps its name to the module registering them.
    """

    def __init__(self, panel: str, modules: Mapping[str, str], *, name: str | None = None, help: str) -> None:
        super().__init__(
            name=name,
            help=help,
            cls=PlainGroup,
            no_args_is_help=name is not None,
            add_completion=False,
            pretty_exceptions_enable=False,
        )
        self.panel = panel
        self.modules: Mapping[str, str] = MappingProxyType(dict(modules))

    @property
    def merged(self) -> bool:
        """Whether the group's commands are top-level commands (it has no name of its own)."""
        return self.info.name is None

    def command(self, name: str | None = None, **kw: Any) -> Callable[[F], F]:  # type: ignore[override]
        """typer's ``command`` (its values converted by :class:`agentreplay.cli.coerce.PlainCommand`); in a merged
        group, listed in the group's panel and kept in ``modules`` order."""
        kw.setdefault("cls", PlainCommand)
        if not self.merged:
            return super().command(name, **kw)
        kw.setdefault("rich_help_panel", self.panel)
        register = super().command(name, **kw)
        rank = {n: i for i, n in enumerate(self.modules)}

        def decorator(f: F) -> F:
            register(f)
            self.registered_commands.sort(key=lambda c: rank.get(command_name(c), len(rank)))
            return f

        return decorator
