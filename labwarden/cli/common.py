"""What every command shares: the consoles, the `--lab` option and profile loading, calling one
tool, and the one renderer of a failure (`error:` what went wrong, `remedy:` what to do, exit)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from labwarden.core.call import ToolCallRecord
from labwarden.core.errors import LabError
from labwarden.lab.config import LabProfile, ProfileError
from labwarden.runtime.runner import call_tool, refuse_at_door
from labwarden.runtime.session import open_lab
from labwarden.tools import registry

PIPE_WIDTH = 240
"""Columns for a console that is no terminal (a pipe, an agent's shell, a log): rich's default
there is 80, which cut ids and names in tables. A terminal keeps its own width; $COLUMNS wins."""


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


out = _console()
"""Results (stdout)."""
err = _console(stderr=True)
"""Failures, progress and notes: never stdout, which carries results (and on stdio, MCP)."""

DEFAULT_LAB = Path(os.environ.get("LABWARDEN_LAB", ".vlab/lab.toml"))
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (the command's model) instead "
                                       "of a table")]
LabOpt = Annotated[Path, typer.Option("--lab", help="lab profile (TOML); default $LABWARDEN_LAB or "
                                      ".vlab/lab.toml")]


def show_failure(console: Console, problem: str, remedy: str | None, lines: Sequence[str] = (),
                 indent: str = "") -> None:
    """`error: PROBLEM`, any detail lines verbatim, and `remedy: REMEDY` (the one way a failure
    looks, whether it ends the command or is one step of many)."""
    console.print(f"{indent}[red]error:[/red] {escape(problem)}", soft_wrap=True)
    for line in lines:
        console.print(f"{indent}  {line}", markup=False, highlight=False, soft_wrap=True)
    if remedy:
        console.print(f"{indent}[yellow]remedy:[/yellow] {escape(remedy)}", soft_wrap=True)


def fail(problem: str, remedy: str, code: int = 1, lines: Sequence[str] = ()) -> NoReturn:
    """Show the failure on stderr and exit with `code` (1: the lab or the request failed; 2: a
    usage error, like a bad option)."""
    show_failure(err, problem, remedy, lines)
    raise typer.Exit(code) from None


def fail_on(exc: LabError, code: int = 1) -> NoReturn:
    """`fail` with a LabError's own problem, detail lines and remedy."""
    fail(exc.problem, exc.remedy, code, exc.lines)


def fail_call(record: ToolCallRecord, code: int) -> NoReturn:
    """`fail` for a tool call that did not succeed (refused, invalid input, or failed)."""
    e = record.error
    assert e is not None, "fail_call needs a failed record"
    fail(f"{record.tool} failed ({e.kind}): {e.message}", e.remedy or "", code, e.lines)


def load_profile(lab: Path) -> LabProfile:
    """The profile, or its keyed errors printed and exit 2 (a usage error, like a bad option)."""
    try:
        return LabProfile.from_file(lab)
    except ProfileError as exc:
        fail_on(exc, 2)


async def call_once(profile: LabProfile, name: str, args: dict[str, Any]) -> ToolCallRecord:
    """Open the lab (guarded: one transcript session), call one tool, printing its progress on
    stderr. Raises LabError when the lab cannot be opened (unreachable, host key, place held)."""
    async def progress(done: float, total: float | None, message: str) -> None:
        err.print(f"[dim]{escape(name)}: {escape(message)}[/dim]", soft_wrap=True)

    # a host-only tool (build, compare, report...) connects to the DUT only if it ever asks it
    # something, so it works with the DUT down
    spec = registry.TOOLS.get(name)
    eager = spec is None or spec.effect != "host_only"
    async with open_lab(profile, progress=progress, connect=eager) as ctx:
        return await call_tool(ctx, name, args)


async def log_malformed(profile: LabProfile, name: str, raw: str, problem: str) -> None:
    """Log a `labwarden call` whose arguments are not a JSON object, as a refused call in a
    session of its own (no DUT connection is opened for it)."""
    async with open_lab(profile, connect=False) as ctx:
        refuse_at_door(ctx, name, raw, problem, remedy="pass one JSON object of arguments")
