"""What `vlab up` and `qlab up` share: their options, and the summary they print -- where the
lab's parts are, then the commands a user runs next."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Protocol

import typer
from rich.table import Table

from labwarden.cli.common import out

PortOpt = Annotated[int, typer.Option(help="SSH port on 127.0.0.1 (0 = a free one)")]
PlacesOpt = Annotated[int, typer.Option(
    help="a fleet: N DUTs as places of a labgrid coordinator started on 127.0.0.1 "
    "(0 = one DUT, no coordinator)")]
PatchOpt = Annotated[list[str] | None, typer.Option(
    help="build the firmware with this patch (id like 0901, or a path); repeatable")]


def show_up(kind: str, dir: Path, rows: list[tuple[str, str]], first_next: str) -> None:
    """The table of an `up` (what, where), then `first_next` and the lab's `down`."""
    table = Table("what", "where", show_header=False)
    for what, where in rows:
        table.add_row(what, where)
    out.print(table)
    out.print(f"next: {first_next}   |   labwarden {kind} down --dir {dir}")


class FleetShown(Protocol):
    """What `vlab status` and `qlab status` show of a fleet (vlab.fleet / qlab.fleet status)."""

    coordinator: str
    coordinator_up: bool
    up: bool

    def model_dump_json(self) -> str: ...


def show_fleet(fst: FleetShown, places: dict[str, str], json_out: bool) -> None:
    """The fleet's coordinator and a line per place (`places`: name -> what to say of it);
    exit 1 unless everything runs."""
    if json_out:
        out.print_json(fst.model_dump_json())
    else:
        table = Table("what", "value", show_header=False)
        table.add_row("coordinator", f"{fst.coordinator} ({'up' if fst.coordinator_up else 'DOWN'})")
        for name, line in places.items():
            table.add_row(f"place {name}", line)
        out.print(table)
    if not fst.up:
        raise typer.Exit(1)
