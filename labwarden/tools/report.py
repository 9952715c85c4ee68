"""report: write the session's story as one self-contained HTML file -- CPU over the workload
points of every stage (one point: a bar per stage), A/B deltas with significance, the
experiment ledger with what the rule decided, the profile's own counters and RSS,
before/after/differential flame graphs (static SVG, drawn without script), the attribution,
the conditions and fingerprint of every window, gates (an experiment's own, nested ones
included, each once), tokens and cost. Several sessions (`sessions`) or every session of this
lab (`session: "all"`: its ledger) make one report.

Host only: reads the transcript and the records, writes a file under the lab's data dir.
"""

from __future__ import annotations

import re

from pydantic import Field

from labwarden.core.errors import ToolError
from labwarden.core.events import ModelCall, ToolCalled
from labwarden.core.paths import within
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.report import data, render
from labwarden.results.report import ReportOutput
from labwarden.tools.context import LabContext
from labwarden.transcripts.access import readable
from labwarden.transcripts.store import TranscriptStore


class ReportInput(ToolInput):
    session: str = Field("current", max_length=64, description="transcript session id (or a "
                         "unique prefix), 'current', or 'all': every session of this lab's "
                         "transcript the caller may read -- the lab's whole ledger")
    sessions: list[str] = Field(default_factory=list, max_length=64, description="more sessions "
                                "(ids or unique prefixes) reported with `session` as one story, "
                                "oldest first: e.g. the sessions server restarts split it into",
                                examples=[["3f2a9c", "b71e04"]])
    title: str = Field("labwarden report", max_length=120, description="the page's title")
    name: str = Field("report", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                      description="file name (without .html) under the lab's reports/ dir")


async def run(ctx: LabContext, inp: ReportInput) -> ReportOutput:
    if ctx.transcript is None:
        raise ToolError("tool", "the report is built from the transcript, and this session has none",
                        "open the lab guarded (the default)")
    # a session reads only what its principal may read (another client's session does not exist)
    store, may = ctx.transcript, readable(ctx.transcript, ctx.principal)
    order = {info.id: i for i, info in enumerate(reversed(store.sessions()))}  # oldest first
    sids: list[str | None]
    if inp.session == "all":  # the lab's ledger: every readable session that did something
        sids = [sid for sid in order if may(sid) and _told(store, sid)] or [ctx.session_id]
    else:
        sids = [ctx.session_id if s == "current" else store.resolve(s, may)
                for s in [inp.session, *inp.sessions]]
    ids = sorted(dict.fromkeys(s for s in sids if s is not None), key=lambda s: order.get(s, -1))
    assert ids, "a guarded session has an id"
    await ctx.report(0, 2, "collecting the session's results")
    d = data.collect(store, ids[-1], ctx.data_dir, re.sub(r"[\x00-\x1f]", "", inp.title),
                     earlier=ids[:-1], declared_counters=ctx.profile.target.uprobes)
    # a report name is an identifier: its file is resolved inside reports/ (a planted symlink
    # there is not written through)
    path = render.write(d, within(ctx.data_dir / "reports", f"{inp.name}.html", what="name"))
    await ctx.report(2, 2, f"report written: {path}")
    return ReportOutput(path=str(path), stages=[s.label for s in d.stages],
                        comparisons=len(d.compares), gates_passed=[not g.failed for g in d.gates],
                        bytes=path.stat().st_size, sessions=d.sessions)


def _told(store: TranscriptStore, sid: str) -> bool:
    """A session with something to tell: a tool call or a model call (a `labwarden report` or
    `lab_status` door's session is one call; one that only started is not listed)."""
    return any(isinstance(e.event, ToolCalled | ModelCall) for e in store.events(sid))


SPEC = ToolSpec(name="report", description=describe(__doc__), input=ReportInput, output=ReportOutput,
                run=run, effect="host_only", free_text=frozenset({"title"}))
