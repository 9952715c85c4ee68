"""`labwarden lab ...`: what a person does to the lab outside any agent session (board health;
on a fleet's profile, every place's health)."""

from __future__ import annotations

import asyncio
import getpass
from typing import Annotated

import typer
from rich.markup import escape

from labwarden.cli.common import DEFAULT_LAB, LabOpt, fail, fail_on, load_profile, out
from labwarden.core.errors import LabError
from labwarden.core.placehealth import NotBad
from labwarden.lab.boardstate import BoardState
from labwarden.runtime import placeadmin
from labwarden.runtime.fleet import is_fleet

app = typer.Typer(help="Lab administration by a person (board health, a fleet's place health).",
                  no_args_is_help=True)
PlaceOpt = Annotated[str | None, typer.Option("--place", help="on a fleet's profile: the place "
                                              "to clear (`lab health` lists them)")]


def _board_line(state: BoardState) -> str:
    return (f"{state.board_health}" + (f" ({escape(state.health_reason)})" if state.health_reason
                                       else "")
            + f"; flashed: {state.flashed_build}  verified: {state.verified_build}")


@app.command("health")
def health(lab: LabOpt = DEFAULT_LAB) -> None:
    """Show the board's health (good / unknown / bad), why, and what was flashed and verified;
    on a fleet's profile, every place's health (and since when, who cleared it) and board."""
    profile = load_profile(lab)
    if not is_fleet(profile):
        state = BoardState.load(profile.data_dir())
        out.print(f"board: {state.board_health}" + (f" ({escape(state.health_reason)})"
                                                     if state.health_reason else ""))
        out.print(f"flashed: {state.flashed_build}  verified: {state.verified_build}")
        return
    fleet = asyncio.run(placeadmin.fleet_health(profile))
    if fleet.note:
        out.print(f"[yellow]note:[/yellow] {escape(fleet.note)}")
    for row in fleet.places:
        h = row.health
        head = (f"{row.place}: {h.state} since {h.since:%Y-%m-%d %H:%M:%S} UTC"
                + (f" ({escape(h.reason)})" if h.reason else "") if h is not None
                else f"{row.place}: unknown (no record yet: not judged by a loop here)")
        out.print(head + ("" if row.listed else "  [not in the fleet now]"), soft_wrap=True)
        out.print(f"  board: {_board_line(row.board)}", soft_wrap=True)
    if not fleet.places:
        out.print("no places: the profile names none and the data dir knows none")


@app.command("clear-bad")
def clear_bad(lab: LabOpt = DEFAULT_LAB,
              reason: Annotated[str, typer.Option(help="what the person checked or fixed")] = "",
              place: PlaceOpt = None) -> None:
    """Clear a `bad` board after a person has inspected it. The board becomes `unknown`: a
    health check (flash a known image, then fingerprint_verify) still has to prove it. On a
    fleet's profile, `--place NAME` clears that place; the loop's next lease of it runs the
    health check first."""
    profile = load_profile(lab)
    if is_fleet(profile):
        if place is None:
            fail(f"{lab} is a fleet's profile: --place is required (which place to clear)",
                 f"`labwarden lab health --lab {lab}` lists the places and their health; "
                 "then `labwarden lab clear-bad --lab ... --place NAME`", 2)
        try:
            cleared = asyncio.run(placeadmin.clear_place(profile, place, getpass.getuser(), reason))
        except NotBad as exc:
            out.print(f"{escape(str(exc))}: nothing to clear")
            raise typer.Exit(1) from None
        except LabError as exc:
            fail_on(exc, 2)
        out.print(f"{place}: unknown ({escape(cleared.reason or '')})", soft_wrap=True)
        return
    if place is not None:
        fail(f"--place {place}: {lab} is a single board's profile, not a fleet's "
             "([dut.labgrid] places, place_match or place_tags)",
             "drop --place to clear this board, or pass the fleet's profile to --lab", 2)
    data_dir = profile.data_dir()
    state = BoardState.load(data_dir)
    if state.board_health != "bad":
        out.print(f"board is {state.board_health}, not bad: nothing to clear")
        raise typer.Exit(1)
    state.board_health = "unknown"
    state.health_reason = f"cleared by {getpass.getuser()}" + (f": {reason}" if reason else "") \
        + "; run a health check"
    state.save(data_dir)
    out.print(f"board: unknown ({escape(state.health_reason)})")
