"""report: write the session's story as one self-contained HTML file -- CPU over the workload
points of every stage, A/B deltas with significance, the profile's own counters and RSS,
before/after/differential flame graphs, the attribution, the conditions and fingerprint of
every window, gates, tokens and cost.

Host only: reads the transcript and the records, writes a file under the lab's data dir.
"""

from __future__ import annotations

import re

from pydantic import Field

from labwarden.core.errors import ToolError
from labwarden.core.paths import within
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.report import data, render
from labwarden.results.report import ReportOutput
from labwarden.tools.context import LabContext
from labwarden.transcripts.access import readable


class ReportInput(ToolInput):
    session: str = Field("current", description="transcript session id, or 'current'")
    title: str = Field("labwarden report", max_length=120, description="the page's title")
    name: str = Field("report", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                      description="file name (without .html) under the lab's reports/ dir")


async def run(ctx: LabContext, inp: ReportInput) -> ReportOutput:
    if ctx.transcript is None:
        raise ToolError("tool", "the report is built from the transcript, and this session has none",
                        "open the lab guarded (the default)")
    # a session reads only what its principal may read (another client's session does not exist)
    sid = ctx.session_id if inp.session == "current" else \
        ctx.transcript.resolve(inp.session, readable(ctx.transcript, ctx.principal))
    assert sid is not None
    await ctx.report(0, 2, "collecting the session's results")
    d = data.collect(ctx.transcript, sid, ctx.data_dir, re.sub(r"[\x00-\x1f]", "", inp.title))
    # a report name is an identifier: its file is resolved inside reports/ (a planted symlink
    # there is not written through)
    path = render.write(d, within(ctx.data_dir / "reports", f"{inp.name}.html", what="name"))
    await ctx.report(2, 2, f"report written: {path}")
    return ReportOutput(path=str(path), stages=[s.label for s in d.stages],
                        comparisons=len(d.compares), gates_passed=[not g.failed for g in d.gates],
                        bytes=path.stat().st_size)


SPEC = ToolSpec(name="report", description=describe(__doc__), input=ReportInput, output=ReportOutput,
                run=run, effect="host_only", free_text=frozenset({"title"}))
