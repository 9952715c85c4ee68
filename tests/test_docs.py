"""The docs a person writes (README and docs/, not the generated command reference) mention every
command, every command has help, and README keeps exactly the two set-up commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from labwarden.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
WRITTEN = README + "".join(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))
                           if p.relative_to(ROOT / "docs").as_posix() != "reference/cli.md")
"""README and every hand-written page: the generated CLI reference lists every command by
construction, so it proves nothing here."""


def _commands() -> list[str]:
    """Every command and subcommand, through click's own listing (the root group is lazy)."""
    group = typer.main.get_command(app)
    ctx = group.context_class(group)
    names = []
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
        if hasattr(cmd, "list_commands"):
            names += [f"{name} {sub}" for sub in cmd.list_commands(ctx)]
        else:
            names.append(name)
    assert len(names) > 20, names
    return names


@pytest.mark.parametrize("command", _commands())
def test_every_command_is_documented_and_has_help(command: str) -> None:
    assert f"labwarden {command}" in WRITTEN, f"neither README nor docs/ mentions `labwarden {command}`"
    cmd = typer.main.get_command(app)
    for part in command.split():
        cmd = cmd.get_command(cmd.context_class(cmd), part)  # type: ignore[attr-defined]
    assert cmd.help, f"`labwarden {command}` has no help text"


def test_readme_has_exactly_the_two_setup_commands() -> None:
    block = re.search(r"## Set up and run\n\n```sh\n(.*?)```", README, re.S)
    assert block is not None
    commands = [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]
    assert commands == ["make demo", "make test"]


def test_tool_table_is_generated_from_the_registry() -> None:
    from labwarden import docgen

    assert docgen.render(README) == README, "stale: run scripts/gen-reference.py"
