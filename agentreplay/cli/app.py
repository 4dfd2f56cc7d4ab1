"""The ``agentreplay`` application: the command groups merged at the top level, and the console entry point.

Every command belongs to one group (:mod:`agentreplay.cli.groups`), a typer sub-app merged into the top level, so a
command runs as ``agentreplay CMD`` whatever its group and ``agentreplay --help`` lists the commands in one panel
per group. The command modules are imported only when needed: :data:`app` imports them all when its commands are
first read (by typer building the command line, by ``CliRunner``, by the docs), :func:`main` imports only the
module of the command it runs, and for the top-level listing reads each command's name and help without building
any command's options.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import TypeVar

import typer
from typer.models import CommandInfo

from agentreplay.cli.coerce import PlainGroup
from agentreplay.cli.groups.base import Group, command_name
from agentreplay.cli.groups.drive import drive_app
from agentreplay.cli.groups.fleet import fleet_app
from agentreplay.cli.groups.sim import sim_app
from agentreplay.cli.groups.trace import trace_app
from agentreplay.cli.groups.validate import validate_app

HELP = "Replay real LLM-agent traces through a hardware-aware serving simulator and validate it."
#: the groups, in the order ``agentreplay --help`` lists their panels
GROUPS: tuple[Group, ...] = (trace_app, sim_app, validate_app, fleet_app, drive_app)
#: Command (or named group) -> the module of agentreplay.cli that defines it, from the groups;
#: ``tests/cli/test_startup.py`` checks it against the registered commands.
COMMANDS: dict[str, str] = {name: module for g in GROUPS for name, module in g.modules.items()}


class _Typer(typer.Typer):
    """A Typer application that imports its command modules (whose decorators register the commands on their
    groups) when its groups are first read: by typer building the command line, by ``CliRunner``, by anyone."""

    lazy = False  #: set once this module is loaded; until then the groups are added without loading anything

    @property  # type: ignore[override]
    def registered_groups(self) -> list[typer.models.TyperInfo]:
        if self.lazy:
            self.lazy = False
            _register()
        return self._groups

    @registered_groups.setter
    def registered_groups(self, value: list[typer.models.TyperInfo]) -> None:
        self._groups = value


T = TypeVar("T", bound=typer.Typer)


def _top(cls: type[T]) -> T:
    """A top-level application with no command yet: its name, help and (empty) callback."""
    top = cls(
        name="agentreplay",
        help=HELP,
        cls=PlainGroup,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @top.callback()
    def _root() -> None:
        """(The top level has no option of its own: its help is ``HELP``.)"""

    return top


app = _top(_Typer)
for _group in GROUPS:
    app.add_typer(_group, rich_help_panel=_group.panel)


def main() -> None:
    """Console entry point. Typer builds the options of every command it is given before it parses, and the
    command modules import what their options list (policy registries, the configuration's defaults): when the
    first argument names a command (or a named group), only its module is imported and typer is given that
    command only (:func:`_alone`); anything else (``--help``, no argument, an unknown name) gets the listing
    (:func:`_listing`)."""
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name in COMMANDS:
        _alone(name)()
    else:
        _listing()()


def _alone(name: str) -> typer.Typer:
    """A top-level application holding command (or named group) ``name`` only, its module imported."""
    importlib.import_module(f"agentreplay.cli.{COMMANDS[name]}")
    group = next(g for g in GROUPS if name in g.modules)
    top = _top(typer.Typer)
    if not group.merged:
        top.add_typer(group, rich_help_panel=group.panel)
        return top
    part = typer.Typer()
    part.registered_commands = [c for c in group.registered_commands if command_name(c) == name]
    part.registered_groups = [g for g in group.registered_groups if g.name == name]
    top.add_typer(part)
    return top


def _listing() -> typer.Typer:
    """The top-level application as ``agentreplay --help`` lists it: every command's (and named group's) name,
    panel and help, with none of its options (typer would build every command's). The command modules are
    imported for their help; a named group's help is its own (``fleet``: the experiments are not imported)."""
    top = _top(typer.Typer)
    for group in GROUPS:
        part = typer.Typer()
        if not group.merged:
            part.registered_commands = [
                _listed(str(group.info.name), _group_help(typer.models.TyperInfo(group)), group.panel)
            ]
        else:
            for module in dict.fromkeys(group.modules.values()):
                importlib.import_module(f"agentreplay.cli.{module}")
            part.registered_commands = [
                *(_listed(command_name(c), _command_help(c), group.panel) for c in group.registered_commands),
                *(_listed(str(g.name), _group_help(g), group.panel) for g in group.registered_groups),
            ]
        top.add_typer(part)
    return top


def _command_help(info: CommandInfo) -> str | None:
    """A registered command's help as typer finds it: given to ``command()``, else its docstring."""
    return inspect.cleandoc(info.help) if info.help else inspect.getdoc(info.callback)


def _group_help(info: typer.models.TyperInfo) -> str | None:
    """A named sub-group's help: given to ``add_typer``, else its application's."""
    given = info.help if isinstance(info.help, str) else None
    return given or (info.typer_instance.info.help if info.typer_instance else None)


def _listed(name: str, help_text: str | None, panel: str) -> CommandInfo:
    """Command (or named group) ``name`` as the listing shows it: its name, panel and help, no option for typer to
    build. Run from the listing (``agentreplay -- NAME ...``), it runs the real one on the arguments it was given,
    as :func:`main` does."""

    def run(ctx: typer.Context) -> None:
        _alone(name)(args=[name, *ctx.args], prog_name=ctx.find_root().info_name)

    return CommandInfo(
        name=name,
        callback=run,
        help=help_text,
        rich_help_panel=panel,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


def _register() -> None:
    """Import the command modules so their ``@group.command()`` decorators run."""
    from agentreplay.cli import (  # noqa: F401
        collect,
        compare,
        describe,
        drive,
        fleet,
        plan,
        query,
        sim,
        study,
        sweep,
        tasks,
        tools,
        validate,
    )


app.lazy = True
