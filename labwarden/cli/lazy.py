"""The root command group, lazy: a command's module is imported when that command runs, not when
`labwarden` starts. Every command module pulls in what its work needs (the agent the anthropic
SDK, `serve` the MCP SDK, `report` matplotlib, `call` the tools and scipy): imported together,
that was ~5 s before `labwarden version` could print a line.

Click documents this pattern ("Lazily Loading Subcommands", a `LazyGroup` overriding
`list_commands`/`get_command`); typer has no lazy loading of its own, so this is that pattern on
typer's group class. `--help` lists the commands from the short help written here, without
importing them; tests/test_cli_startup.py checks that each one says what the command's own help
says, so the two cannot drift.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:  # typer 0.2x vendors click: these are its classes, not click's
    from typer import _click as click


@dataclass(frozen=True)
class Lazy:
    """One command of the root group: `module:attr` names a function (a command) or a
    `typer.Typer` (a group of commands), and `help` its first line for the root's --help."""

    target: str
    help: str


class LazyGroup(TyperGroup):
    """A typer group whose commands are `Lazy` entries, loaded on first use."""

    lazy: ClassVar[dict[str, Lazy]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *self.lazy]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        if self._listing:  # --help: the name and its line, nothing imported
            return TyperCommand(cmd_name, help=self.lazy[cmd_name].help)
        command = load(cmd_name, self.lazy[cmd_name].target, self.rich_markup_mode)
        self.add_command(command, cmd_name)
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def load(name: str, target: str, markup: Any = None) -> click.Command:
    """The click command for `module:attr`: a typer.Typer becomes its group, a function a command
    built the way typer builds a registered one."""
    module, attr = target.split(":")
    obj = getattr(importlib.import_module(module), attr)
    if isinstance(obj, typer.Typer):
        group = typer.main.get_group(obj)
        group.name = name
        return group
    one = typer.Typer(rich_markup_mode=markup, add_completion=False)
    one.command(name)(obj)
    return typer.main.get_command(one)
