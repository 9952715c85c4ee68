"""What a person does to a fleet's places outside the loop (`labwarden lab health|clear-bad
--lab FLEET`): see every place's health, and clear a bad one once its DUT is fixed.

A place's health (good / unknown / bad, as LAVA keeps it) is the fleet's (DATA/fleet/health.json);
its board state (DATA/places/NAME/labstate.json) is the guard's for that place. Clearing moves
both from bad to unknown: the loop leases the place again, and a board left unknown runs a
health check before any other call there (runtime/fleet.PlacePool.prove), as a single board must.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.core.paths import PathRefused
from labwarden.core.placehealth import HealthStore, NotBad, PlaceState
from labwarden.lab.boardstate import BoardState
from labwarden.lab.config import LabProfile
from labwarden.runtime.fleet import is_fleet, place_dir

COORDINATOR_TIMEOUT_S = 10.0


class PlaceRow(BaseModel):
    """One place as `lab health` shows it."""

    place: str
    health: PlaceState | None = Field(None, description="None: no record yet (never judged here)")
    board: BoardState = Field(description="the place's board state (the guard's)")
    listed: bool = Field(True, description="the profile or the coordinator names it (False: only "
                         "the data dir remembers it)")


class FleetHealth(BaseModel):
    places: list[PlaceRow]
    note: str | None = Field(None, description="why the list may be incomplete (coordinator unreachable)")


class NoSuchPlace(LabError):
    kind = "invalid_input"


async def _listed(profile: LabProfile) -> tuple[list[str], str | None]:
    """The fleet's places: `places` as written, else the coordinator's matches; with the
    coordinator unreachable, none and why."""
    from labwarden.lab.fleet import Fleet
    from labwarden.lab.labgrid import LabgridConfig

    lg = profile.dut.labgrid
    assert lg is not None
    if lg.places:
        return list(lg.places), None
    try:
        async with asyncio.timeout(COORDINATOR_TIMEOUT_S):
            return await Fleet(LabgridConfig(**lg.model_dump())).places(), None
    except (LabError, TimeoutError) as exc:
        why = getattr(exc, "problem", None) or f"no answer in {COORDINATOR_TIMEOUT_S:g} s"
        return [], f"the coordinator was not asked ({why}): only places this data dir knows are shown"


def _board(profile: LabProfile, place: str) -> BoardState:
    return BoardState.load(place_dir(profile.data_dir(), place))


async def fleet_health(profile: LabProfile) -> FleetHealth:
    """Every place of the fleet with its health and board state, sorted by name."""
    listed, note = await _listed(profile)
    known = HealthStore(profile.data_dir()).all()
    names = sorted({*listed, *known})
    return FleetHealth(note=note, places=[PlaceRow(place=n, health=known.get(n), board=_board(profile, n),
                                                   listed=n in listed or note is not None)
                                          for n in names])


async def clear_place(profile: LabProfile, place: str, by: str, reason: str = "") -> PlaceState:
    """Clear a bad place: bad -> unknown in the fleet's health, and its board state too when
    the guard had marked that bad. NoSuchPlace for a name the fleet does not have (or that is
    not a plain identifier: PathRefused), NotBad when it is not bad."""
    assert is_fleet(profile)
    try:
        where = place_dir(profile.data_dir(), place)  # a name that is a path is refused here
    except PathRefused as exc:
        raise NoSuchPlace(f"--place: {exc.problem}", "pass a place name as `labwarden lab health` "
                          "lists it") from None
    store = HealthStore(profile.data_dir())
    if place not in store.all():
        listed, _ = await _listed(profile)
        if place not in listed:
            shown = ", ".join(sorted({*listed, *store.all()})) or "none known"
            raise NoSuchPlace(f"--place {place}: the fleet has no such place (places: {shown})",
                              f"`labwarden lab health --lab {profile.source or 'FLEET_TOML'}` lists "
                              "them; pass one of those to --place")
    state = store.clear(place, by, reason)  # NotBad: nothing is written
    board = BoardState.load(where)
    if board.board_health == "bad":
        board.board_health = "unknown"
        board.health_reason = f"{state.reason}; run a health check"
        board.save(where)
    return state


__all__ = ["FleetHealth", "NoSuchPlace", "NotBad", "PlaceRow", "clear_place", "fleet_health"]
