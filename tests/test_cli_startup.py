"""CLI start-up: a command imports only what it uses (cli/lazy.py, the lazy tool registry).

Each check runs a fresh interpreter, as a user's shell does, and reads its `sys.modules`: an
import that creeps back (the agent's anthropic SDK, mcp, scipy, matplotlib, labgrid) fails here,
not as seconds on every command. Times are bench/startup.py's job, never asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from labwarden.cli.app import Root, app
from labwarden.cli.lazy import load

Command = (TyperCommand, TyperGroup)

HEAVY = ("anthropic", "mcp", "scipy", "matplotlib", "labgrid", "numpy")


def _loaded(code: str) -> list[str]:
    """The heavy packages a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return sorted(set(json.loads(out.stdout.splitlines()[-1])) & set(HEAVY))


def test_importing_the_cli_app_pulls_in_no_heavy_package() -> None:
    assert _loaded("import labwarden.cli.app") == []


def test_a_tool_call_through_the_cli_pulls_in_only_its_tool() -> None:
    """What `labwarden call lab_status` imports before it connects: the call door, the runner,
    the lab session and the one tool -- not the other twenty."""
    code = ("from labwarden.cli.app import app\nfrom labwarden.cli import call\n"
            "from labwarden.tools import registry\nimport labwarden.runtime.session\n"
            "registry.TOOLS['lab_status']\nimport sys\n"
            "assert 'labwarden.tools.experiment' not in sys.modules")
    assert _loaded(code) == []


def test_the_check_sees_a_heavy_import() -> None:
    assert _loaded("import labwarden.tools.compare") == ["numpy", "scipy"]


def test_version_and_help_run_without_importing_any_command() -> None:
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom labwarden.cli.app import app\n"
            "r = CliRunner().invoke(app, ['--help'])\nassert r.exit_code == 0, r.output\n"
            "r = CliRunner().invoke(app, ['version'])\nassert r.exit_code == 0, r.output\n"
            "assert not [m for m in sys.modules if m.startswith('labwarden.cli.') and m not in "
            "('labwarden.cli.app', 'labwarden.cli.lazy')], sorted(sys.modules)")
    assert _loaded(code) == []


@pytest.mark.parametrize("name", list(Root.lazy))
def test_each_lazy_command_loads_and_its_listed_help_is_its_own(name: str) -> None:
    """--help lists a command by the line written in app.py; it must be the start of what the
    command says of itself, so the list cannot drift from the commands."""
    command = load(name, Root.lazy[name].target)
    assert isinstance(command, Command) and command.name == name
    own = " ".join((command.help or "").split())
    listed = " ".join(Root.lazy[name].help.split())
    assert own.startswith(listed.rstrip(".")), f"{name}: listed {listed!r}, its own help {own!r}"


def test_help_lists_every_command_and_a_command_runs() -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in Root.lazy:
        assert f" {name} " in result.output, name
    version = CliRunner().invoke(app, ["version"])
    from labwarden import __version__

    assert version.exit_code == 0 and version.output.strip() == __version__
    unknown = CliRunner().invoke(app, ["vlabb"])
    assert unknown.exit_code == 2 and "vlabb" in unknown.output
    assert isinstance(typer.main.get_command(app), Root)
