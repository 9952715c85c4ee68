"""What `vlab up` and `qlab up` share: their options, and the summary they print -- where the
lab's parts are, then the commands a user runs next."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
