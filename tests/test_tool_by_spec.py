"""Adding a tool means one new module: a throwaway tool, registered at run time, is treated by its
spec alone -- the guard (requirements, argument safety), the budgets (counts_as_flash), the
transcript (measured calls and their conditions), the CLI door and the MCP door -- with no other
file naming it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.errors import LabError
from labwarden.core.events import GuardDecision, ToolCalled
from labwarden.core.spec import ToolInput, ToolSpec
from labwarden.lab.config import LabProfile
from labwarden.lab.dut import procs
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.server.app import build_server
from labwarden.tools import registry
from labwarden.tools.context import LabContext
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab.layout import VlabLayout

from .tooling import baseline

pytestmark = pytest.mark.anyio
NAME = "throwaway_probe"


class ProbeInput(ToolInput):
    target: str = Field("stad", description="a process name")
    note: str = Field("", description="prose, exempt from the identifier check")


class ProbeOutput(BaseModel):
    pid: int | None
    note: str


async def run(ctx: LabContext, inp: ProbeInput) -> ProbeOutput:
    pid = await procs.find_pid(ctx.device, inp.target, ctx.profile.target.pidfile(inp.target))
    return ProbeOutput(pid=pid, note=inp.note)


SPEC = ToolSpec(name=NAME, description="find a process on the DUT (a throwaway test tool)",
                input=ProbeInput, output=ProbeOutput, run=run, effect="read_only",
                requires=frozenset({"fingerprint_verified"}), measures=True,
                counts_as_flash=True, free_text=frozenset({"note"}))


@pytest.fixture
def registered() -> Iterator[ToolSpec]:
    registry.register(SPEC)
    try:
        yield SPEC
    finally:
        registry.unregister(NAME)


def _profile(lab: VlabLayout, flashes_per_hour: int = 6) -> LabProfile:
    prof = LabProfile.from_file(lab.lab_toml)
    prof.policy.budgets.flashes_per_hour = flashes_per_hour
    return prof


async def test_guard_budget_and_transcript_follow_the_spec(lab: VlabLayout, registered: ToolSpec) -> None:
    prof = _profile(lab, flashes_per_hour=1)
    async with open_lab(prof) as ctx:
        refused = await call_tool(ctx, NAME, {})  # requires fingerprint_verified: nobody verified
        assert refused.error is not None and refused.error.code == "fingerprint_unverified"
        assert (await call_tool(ctx, "fingerprint_verify", {"build_id": baseline(lab)})).ok
        unsafe = await call_tool(ctx, NAME, {"target": "stad; kill -9 1"})
        assert unsafe.error is not None and unsafe.error.code == "unsafe_argument"
        ok = await call_tool(ctx, NAME, {"note": "prose; with $ and spaces is fine here"})
        assert ok.ok and ok.result is not None and ok.result["pid"], ok.error
        again = await call_tool(ctx, NAME, {})  # counts_as_flash: 1 per hour is used up
        assert again.error is not None and again.error.code == "budget_exceeded"
        assert "flashes" in again.error.message
        sid = ctx.session_id
    assert sid is not None
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        calls = [e.event for e in store.events(sid) if e.event.kind == "tool_called"
                 and e.event.call.tool == NAME]
    measured = [c for c in calls if c.call.ok]
    assert len(measured) == 1 and measured[0].measured  # type: ignore[union-attr]
    assert measured[0].conditions is not None  # type: ignore[union-attr]
    assert measured[0].conditions.fingerprint_verified  # type: ignore[union-attr]
    assert not any(c.measured for c in calls if not c.call.ok)  # type: ignore[union-attr]


async def test_mcp_door_publishes_it_from_the_spec(lab: VlabLayout, registered: ToolSpec) -> None:
    async with Client(build_server(_profile(lab))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert NAME in tools
        tool = tools[NAME]
        assert tool.annotations is not None and tool.annotations.read_only_hint
        assert set(tool.input_schema["properties"]) == {"target", "note"}
        assert "fingerprint_verified" in (tool.description or "")
        await client.call_tool("fingerprint_verify", {"build_id": baseline(lab)})
        res = await client.call_tool(NAME, {"target": "stamon"})
        assert not res.is_error and res.structured_content is not None
        assert res.structured_content["pid"] == int((lab.run_dir / "stamon.pid").read_text())


def test_cli_door_runs_it_from_the_spec(lab: VlabLayout, registered: ToolSpec, tmp_path: Path) -> None:
    runner = CliRunner()
    helped = runner.invoke(app, ["call", NAME, "--help"])
    assert helped.exit_code == 0 and "note" in helped.output and "fingerprint_verified" in helped.output
    listed = runner.invoke(app, ["call", "--help"])
    assert NAME in listed.output
    res = runner.invoke(app, ["call", NAME, '{"target": "stamon"}', "--lab", str(lab.lab_toml)])
    assert res.exit_code in (0, 1), res.output
    if res.exit_code == 1:  # each `labwarden call` is its own session: verify, then call again
        assert "fingerprint_unverified" in res.output or "fingerprint_verify" in res.output
        ok = runner.invoke(app, ["call", "fingerprint_verify", json.dumps({"build_id": baseline(lab)}),
                                 "--lab", str(lab.lab_toml)])
        assert ok.exit_code == 0, ok.output
        res = runner.invoke(app, ["call", NAME, '{"target": "stamon"}', "--lab", str(lab.lab_toml)])
    assert res.exit_code == 0, res.output
    assert re.search(r'"pid":\s*\d+', res.stdout)


CHILD, PARENT = "throwaway_child", "throwaway_parent"


class ChildOutput(BaseModel):
    lease_taken: int = Field(description="lease acquisitions so far in the session")


class ParentOutput(BaseModel):
    first: int
    second: str
    healed: list[str]


async def run_child(ctx: LabContext, inp: ToolInput) -> ChildOutput:
    return ChildOutput(lease_taken=ctx.facts.get("lease_taken", 0))


async def run_parent(ctx: LabContext, inp: ToolInput) -> ParentOutput:
    first = await ctx.call(CHILD, {})
    try:
        await ctx.call(CHILD, {})
        second = "ran"
    except LabError as exc:  # the flash budget refuses the nested call as it would any call
        second = f"{exc.code}: {exc.problem}"
    return ParentOutput(first=first.lease_taken, second=second, healed=await ctx.heal())


CHILD_SPEC = ToolSpec(name=CHILD, description="a nested flash-like step (a throwaway test tool)",
                      input=ToolInput, output=ChildOutput, run=run_child, effect="read_only",
                      requires=frozenset({"lease"}), counts_as_flash=True)
PARENT_SPEC = ToolSpec(name=PARENT, description="asks for two children (a throwaway test tool)",
                       input=ToolInput, output=ParentOutput, run=run_parent, effect="read_only",
                       requires=frozenset({"lease", "env_pinned"}))


async def test_a_nested_call_passes_the_same_door_under_its_parent(lab: VlabLayout) -> None:
    """`ctx.call` runs a tool as a nested call: its flash slot is taken (the second is refused,
    naming the budget), the parent's lease is reused (no second take), it takes no slot of the
    session's tool_calls, and its events carry the parent's call id -- a tree replay shows and
    audit checks."""
    from labwarden.transcripts import timeline
    from labwarden.transcripts.audit import audit
    from labwarden.transcripts.otlp import spans

    (lab.data_dir / "flashes.json").unlink(missing_ok=True)
    prof = _profile(lab, flashes_per_hour=1)
    prof.policy.budgets.tool_calls = 2
    registry.register(CHILD_SPEC)
    registry.register(PARENT_SPEC)
    try:
        async with open_lab(prof) as ctx:
            assert ctx.guard is not None
            acquire = ctx.guard.lease.acquire

            async def counted() -> object:
                ctx.facts["lease_taken"] = ctx.facts.get("lease_taken", 0) + 1
                return await acquire()

            ctx.guard.lease.acquire = counted  # type: ignore[method-assign]
            rec = await call_tool(ctx, PARENT, {})
            assert rec.ok and rec.result is not None, rec.error
            assert rec.result["first"] == 1  # the parent's take; the child took none
            assert rec.result["second"].startswith(f"budget_exceeded: {CHILD}: flashes: 1 of this DUT")
            assert rec.result["healed"] == []  # nothing drifted
            assert (await call_tool(ctx, "lab_status", {})).ok  # 2nd of 2: children took none
            over = await call_tool(ctx, "lab_status", {})
            assert over.error is not None and over.error.code == "budget_exceeded"
            sid = ctx.session_id
        assert sid is not None
        with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
            events = store.events(sid)
            report = audit(store, sid)
            tl = timeline.of_session(store, sid)
    finally:
        registry.unregister(CHILD)
        registry.unregister(PARENT)
    calls = [(s.seq, s.event) for s in events if isinstance(s.event, ToolCalled)]
    parent = next((seq, e) for seq, e in calls if e.call.tool == PARENT)
    kids = [(seq, e) for seq, e in calls if e.parent_id == parent[1].call.id]
    assert [(e.call.tool, e.call.ok) for _, e in kids] == [(CHILD, True), (CHILD, False)]
    assert all(seq < parent[0] for seq, _ in kids)  # a parent is logged when it ends
    refusal = next(s.event for s in events if isinstance(s.event, GuardDecision)
                   and s.event.decision == "refuse" and s.event.tool == CHILD)
    assert refusal.parent_id == parent[1].call.id and refusal.code == "budget_exceeded"
    assert report.ok and "tree" in report.checks, report.problems
    rows = [(r.what, r.depth) for r in tl.rows if r.kind in ("tool_called", "guard_decision")]
    at = rows.index((PARENT, 0))
    assert rows[at + 1:at + 4] == [(CHILD, 1), (CHILD, 1), (CHILD, 1)]  # two calls, one refusal
    assert tl.totals.nested_calls == 2
    traced = {sp.name: sp for sp in spans(sid, events).resource_spans[0].scope_spans[0].spans
              if sp.name.endswith(PARENT)}
    kid_spans = [sp for sp in spans(sid, events).resource_spans[0].scope_spans[0].spans
                 if sp.name == f"execute_tool {CHILD}"]
    assert len(kid_spans) == 2  # OTLP: the children are spans under their parent's span
    assert {sp.parent_span_id for sp in kid_spans} == {traced[f"execute_tool {PARENT}"].span_id}
