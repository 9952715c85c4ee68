"""`labwarden doctor`: is this machine ready for the lab? A table of checks, each with its remedy."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from labwarden import doctor as checks
from labwarden.cli.common import JsonOpt, out


def doctor(json_out: JsonOpt = False) -> None:
    """Check perf, perf_event_paranoid, tracefs/uprobes, inferno, cargo, gcc; name each remedy.

    Exit code 0 when everything is ready, 2 when something is missing (the vlab still runs
    without root; what needs root is listed)."""
    results = checks.checks()
    if json_out:
        out.print_json(json.dumps([c.model_dump() for c in results]))
    else:
        table = Table("check", "state", "detail", "needed for", "remedy")
        for c in results:
            table.add_row(c.name, "[green]ok[/green]" if c.ok else "[red]missing[/red]",
                          c.detail, c.needed_for, c.remedy or "")
        out.print(table)
    raise typer.Exit(0 if all(c.ok for c in results) else 2)
