"""`labwarden report SESSION`: the door of the `report` tool -- a session's story as one
self-contained HTML file under the lab's reports/ dir. Called through the runner like any tool
(guarded, and logged in a transcript session of its own)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from labwarden.cli.common import DEFAULT_LAB, LabOpt, call_once, fail_call, fail_on, load_profile, out
from labwarden.core.errors import LabError
from labwarden.results import output_of
from labwarden.results.report import ReportOutput
from labwarden.tools import registry

_FIELDS = registry.get("report").input.model_fields  # option help and defaults come from the schema


def report(
    session: Annotated[str, typer.Argument(help="transcript session id, or a unique prefix of one")],
    lab: LabOpt = DEFAULT_LAB,
    title: Annotated[str, typer.Option(help=_FIELDS["title"].description)] = _FIELDS["title"].default,
    name: Annotated[str, typer.Option(help=_FIELDS["name"].description)] = _FIELDS["name"].default,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole call record")] = False,
) -> None:
    """Write a session's report as one self-contained HTML file and print its path.

    The report tool's door: curves, A/B deltas, flame graphs, gates, conditions and cost of the
    session (`labwarden transcripts list` finds its id), under the lab's reports/ dir."""
    profile = load_profile(lab)
    try:
        record = asyncio.run(call_once(profile, "report", {"session": session, "title": title,
                                                           "name": name}))
    except LabError as exc:  # the lab could not be opened
        fail_on(exc)
    if as_json:
        out.print_json(record.model_dump_json())
    if not record.ok:
        fail_call(record, 1)
    if not as_json:
        written = output_of(record)
        assert isinstance(written, ReportOutput)  # an ok report call carries its output
        out.print(written.path, markup=False, highlight=False, soft_wrap=True)
