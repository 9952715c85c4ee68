"""`labwarden report [SESSION...] [--all]`: the door of the `report` tool -- a session's story,
several sessions' as one, or the lab's whole ledger, as one self-contained HTML file under the
lab's reports/ dir. Called through the runner like any tool (guarded, and logged in a
transcript session of its own)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from labwarden.cli.common import DEFAULT_LAB, LabOpt, call_once, fail, fail_call, fail_on, load_profile, out
from labwarden.core.errors import LabError
from labwarden.results import output_of
from labwarden.results.report import ReportOutput
from labwarden.tools import registry

_FIELDS = registry.get("report").input.model_fields  # option help and defaults come from the schema


def report(
    sessions: Annotated[list[str] | None, typer.Argument(
        help="transcript session ids, or unique prefixes (`labwarden transcripts list`); "
             "several make one report, oldest first", show_default=False)] = None,
    all_sessions: Annotated[bool, typer.Option(
        "--all", help="every session of this lab's transcript: the lab's whole ledger "
                      "(experiments, comparisons, gates, sweeps of every session) in one report")] = False,
    lab: LabOpt = DEFAULT_LAB,
    title: Annotated[str, typer.Option(help=_FIELDS["title"].description)] = _FIELDS["title"].default,
    name: Annotated[str, typer.Option(help=_FIELDS["name"].description)] = _FIELDS["name"].default,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole call record")] = False,
) -> None:
    """Write a report of one session, several, or every session of the lab (--all) as one
    self-contained HTML file and print its path.

    The report tool's door: curves, A/B deltas, the experiment ledger and what the rule
    decided, flame graphs, gates, counters, conditions and cost -- of one session (`labwarden
    transcripts list` finds its id), of several (`labwarden report ID1 ID2`), or of every
    session of the lab (`labwarden report --all`), under the lab's reports/ dir."""
    if all_sessions == bool(sessions):
        fail("name the session(s) to report, or --all for every session of this lab (not both)",
             "labwarden transcripts list --lab LAB finds the ids: labwarden report ID [ID...], "
             "or labwarden report --all", 2)
    args = ({"session": "all"} if all_sessions or not sessions
            else {"session": sessions[0], "sessions": sessions[1:]})
    profile = load_profile(lab)
    try:
        record = asyncio.run(call_once(profile, "report", {**args, "title": title, "name": name}))
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
