"""The README documents every command, and keeps exactly the two set-up commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from labwarden.cli.app import app

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _commands() -> list[str]:
    group = typer.main.get_command(app)
    names = []
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(cmd, "commands"):
            names += [f"{name} {sub}" for sub in cmd.commands]
        else:
            names.append(name)
    return names


@pytest.mark.parametrize("command", _commands())
def test_every_command_is_documented_and_has_help(command: str) -> None:
    assert f"labwarden {command}" in README, f"README does not mention `labwarden {command}`"
    group = typer.main.get_command(app)
    cmd = group
    for part in command.split():
        cmd = cmd.commands[part]  # type: ignore[attr-defined]
    assert cmd.help, f"`labwarden {command}` has no help text"


def test_readme_has_exactly_the_two_setup_commands() -> None:
    block = re.search(r"## Set up and run\n\n```sh\n(.*?)```", README, re.S)
    assert block is not None
    commands = [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]
    assert commands == ["make demo", "make test"]


def test_tool_table_is_generated_from_the_registry() -> None:
    from labwarden import docgen

    assert docgen.render(README) == README, "stale: run `python -m labwarden.docgen`"
