"""`labwarden lab ...`: what a person does to the lab outside any agent session."""

from __future__ import annotations

import getpass
from typing import Annotated

import typer
from rich.markup import escape

from labwarden.cli.common import DEFAULT_LAB, LabOpt, load_profile, out
from labwarden.lab.boardstate import BoardState

app = typer.Typer(help="Lab administration by a person (board health).", no_args_is_help=True)


@app.command("health")
def health(lab: LabOpt = DEFAULT_LAB) -> None:
    """Show the board's health (good / unknown / bad), why, and what was flashed and verified."""
    state = BoardState.load(load_profile(lab).data_dir())
    out.print(f"board: {state.board_health}" + (f" ({escape(state.health_reason)})"
                                                 if state.health_reason else ""))
    out.print(f"flashed: {state.flashed_build}  verified: {state.verified_build}")


@app.command("clear-bad")
def clear_bad(lab: LabOpt = DEFAULT_LAB,
              reason: Annotated[str, typer.Option(help="what the person checked or fixed")] = "") -> None:
    """Clear a `bad` board after a person has inspected it. The board becomes `unknown`: a
    health check (flash a known image, then fingerprint_verify) still has to prove it."""
    data_dir = load_profile(lab).data_dir()
    state = BoardState.load(data_dir)
    if state.board_health != "bad":
        out.print(f"board is {state.board_health}, not bad: nothing to clear")
        raise typer.Exit(1)
    state.board_health = "unknown"
    state.health_reason = f"cleared by {getpass.getuser()}" + (f": {reason}" if reason else "") \
        + "; run a health check"
    state.save(data_dir)
    out.print(f"board: unknown ({escape(state.health_reason)})")
