"""The loop on a fleet while a call still runs: the turn comes back when a place idles (the late
result follows), a stop waits for the running call, a cancel cancels it and frees the places --
on two real vlabs behind a real labgrid coordinator and exporter (`vlab up --places 2`).

Behaviour only -- which call ran where and when, what the model was sent, what the coordinator
holds -- never a verdict (their experiments are no-ops, whatever the rule says of them), so the
module runs with the light tests (tests/conftest.py LIGHT_MODULES); the fleet's measured tests
are in tests/test_fleet_loop.py. The model is the Messages API stand-in (tests/messages_standin.py):
the only fake.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from labwarden.agent import overnight
from labwarden.agent.loop import PENDING, Limits
from labwarden.agent.model import Model, ModelOptions
from labwarden.core.events import Note, ToolCalled
from labwarden.lab.config import LabProfile
from labwarden.transcripts.audit import audit
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import fleet as vlab_fleet

from .fleet_fixtures import (  # noqa: F401 (clean_lg_env: autouse)
    clean_lg_env,
    coordinator_state,
    quick_profile,
    vlab_fleet_fixture,
)
from .messages_standin import MessagesStandIn, ToolUse, Turn, nth_result
from .patching import change
from .test_fleet_loop import _api_key, experiments  # noqa: F401 (_api_key: autouse)

fleet = vlab_fleet_fixture(2, "fleetturns")
"""Two vlabs, each pinned to a CPU, as places vlab-0 and vlab-1 of a real coordinator."""


def test_a_turn_comes_back_when_a_place_idles_and_its_late_result_follows(
        fleet: vlab_fleet.FleetInfo, tmp_path: Path) -> None:
    """`lab_status` and an experiment asked for in one turn: once the status has come back and
    its place idles, the turn comes back with the experiment still running (its tool_result
    says so), the model's next call runs on the idle place while the experiment still runs,
    and the experiment's result follows as text, once -- with the next turn's results, or,
    when the model ended its turn first, in a message of its own before the model answers
    again. The model is the stand-in (scripted turns); the fleet, coordinator, DUTs and
    transcript are real."""
    from labwarden.agent.loop import LATE
    from labwarden.core.events import ModelCall

    lab = quick_profile(fleet)
    turns = [Turn(tools=[ToolUse("patch_submit", {"name": "comment-4", "diff": change(
                 "wld.c", "/* ---- driver pull ---- */", "/* ---- driver pull. ---- */")})]),
             Turn(tools=[ToolUse("lab_status", {}),
                         ToolUse("experiment", nth_result(0, "patch_id", "patch"))]),
             Turn(tools=[ToolUse("lab_status", {})]),
             Turn(text="DONE: judged."),
             Turn(text="DONE: judged, the late one too.")]

    async def go() -> tuple[overnight.LoopResult, list[dict[str, Any]]]:
        with MessagesStandIn(turns) as api:
            model = Model(ModelOptions(base_url=api.url, api_key="sk-standin"))
            res = await overnight.run_loop(LabProfile.from_file(lab), model, goal="fleet release",
                                           limits=Limits(budget_usd=20.0, max_turns=7),
                                           out_dir=tmp_path / "out", resume=None)
            return res, api.requests

    res, requests = asyncio.run(go())
    assert res.outcome.stop == "done", res.outcome
    newest = [body["messages"][-1]["content"] for body in requests]
    uses = [b for b in requests[2]["messages"][-2]["content"] if b["type"] == "tool_use"]
    exp_id = uses[1]["id"]
    results = [b for b in newest[2] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [uses[0]["id"], exp_id]
    assert not results[0].get("is_error"), results[0]
    assert results[1]["content"][0]["text"] == PENDING, "the turn waited for its longest call"
    late = [b["text"] for content in newest[3:] if isinstance(content, list) for b in content
            if b.get("type") == "text" and b["text"].startswith(LATE.format(name="experiment", id=exp_id))]
    assert len(late) == 1 and '"experiment_id"' in late[0], late
    with TranscriptStore(LabProfile.from_file(lab).data_dir() / "transcripts.db") as store:
        report = audit(store, res.session_id)
        assert report.ok, report.problems
        events = [e.event for e in store.events(res.session_id)]
    top = [e for e in events if isinstance(e, ToolCalled) and e.parent_id is None]
    exp = next(e for e in top if e.call.tool == "experiment")
    second = sorted((e for e in top if e.call.tool == "lab_status"), key=lambda e: e.call.started_at)[1]
    # the next turn's call ran on the other place while the experiment still ran
    assert second.place != exp.place and second.call.started_at < exp.ts, (second, exp)
    assert any(exp.call.started_at < e.ts < exp.ts for e in events if isinstance(e, ModelCall))


@pytest.mark.long  # ~40 s: make test keeps the test above, which covers the turn coming back
def test_a_stop_with_a_call_still_running_waits_for_it(fleet: vlab_fleet.FleetInfo,
                                                       tmp_path: Path) -> None:
    """The turn comes back with an experiment still running and the loop then stops (its
    --max-turns cap): the run returns only once the experiment has ended -- its record decided,
    its call in the transcript -- and a note names the call that finished after the stop."""
    lab = quick_profile(fleet)
    turns = [Turn(tools=[ToolUse("patch_submit", {"name": "comment-5", "diff": change(
                 "wld.c", "/* ---- driver pull ---- */", "/* ---- driver pull: ---- */")})]),
             Turn(tools=[ToolUse("lab_status", {}),
                         ToolUse("experiment", nth_result(0, "patch_id", "patch"))])]

    async def go() -> overnight.LoopResult:
        with MessagesStandIn(turns) as api:
            model = Model(ModelOptions(base_url=api.url, api_key="sk-standin"))
            return await overnight.run_loop(LabProfile.from_file(lab), model, goal="fleet stop",
                                            limits=Limits(budget_usd=20.0, max_turns=2),
                                            out_dir=tmp_path / "out", resume=None)

    res = asyncio.run(go())
    assert res.outcome.stop == "max_turns", res.outcome
    (x,) = experiments(lab, res.session_id)
    assert x.decision != "failed" and x.ended_at is not None, x.reason
    with TranscriptStore(LabProfile.from_file(lab).data_dir() / "transcripts.db") as store:
        assert audit(store, res.session_id).ok
        events = [e.event for e in store.events(res.session_id)]
    exp = next(e for e in events if isinstance(e, ToolCalled) and e.call.tool == "experiment")
    notes = [e for e in events if isinstance(e, Note) and e.author == "labwarden"
             and "finished after the stop" in e.text]
    assert len(notes) == 1 and exp.ts <= notes[0].ts, notes
    (late,) = json.loads(notes[0].text)["finished after the stop"]
    assert late["tool"] == "experiment" and late["ok"] is True, late


@pytest.mark.long  # ~40 s, as the test above
def test_a_cancelled_loop_cancels_its_running_calls_and_frees_the_places(fleet: vlab_fleet.FleetInfo,
                                                                        tmp_path: Path) -> None:
    """The turn comes back with an experiment still running, the model ends its turn (so the
    loop waits for it), and the loop is cancelled then (a person's ^C, a service stopping): the
    experiment is cancelled, not left running -- its call in the transcript as cancelled -- and
    the coordinator holds no place and no reservation of the loop's after it returns."""
    lab = quick_profile(fleet)
    turns = [Turn(tools=[ToolUse("patch_submit", {"name": "comment-6", "diff": change(
                 "wld.c", "/* ---- driver pull ---- */", "/* ---- driver pull; ---- */")})]),
             Turn(tools=[ToolUse("lab_status", {}),
                         ToolUse("experiment", nth_result(0, "patch_id", "patch"))]),
             Turn(text="DONE: judged."),
             Turn(text="DONE: judged, the late one too.")]
    sid: list[str] = []

    async def go() -> list[dict[str, Any]]:
        with MessagesStandIn(turns) as api:
            model = Model(ModelOptions(base_url=api.url, api_key="sk-standin"))
            loop = asyncio.create_task(overnight.run_loop(
                LabProfile.from_file(lab), model, goal="fleet cancel", out_dir=tmp_path / "out",
                limits=Limits(budget_usd=20.0, max_turns=6), resume=None,
                on_start=lambda s, _r: sid.append(s)))
            while len(api.requests) < 3 and not loop.done():  # the model has ended its turn
                await asyncio.sleep(0.2)
            await asyncio.sleep(2)  # the loop waits for the experiment now
            assert not loop.done(), "the experiment ended before the cancel: no call was running"
            loop.cancel()
            with pytest.raises(asyncio.CancelledError):
                await loop
            return api.requests

    requests = asyncio.run(go())
    assert len(requests) == 3, "the model was called again: the loop did not wait"
    uses = [b for b in requests[2]["messages"][-2]["content"] if b["type"] == "tool_use"]
    pending = [b for b in requests[2]["messages"][-1]["content"] if b.get("type") == "tool_result"
               and b["tool_use_id"] == uses[1]["id"]]
    assert pending and pending[0]["content"][0]["text"] == PENDING, pending
    with TranscriptStore(LabProfile.from_file(lab).data_dir() / "transcripts.db") as store:
        events = [e.event for e in store.events(sid[0])]
    exp = next(e for e in events if isinstance(e, ToolCalled) and e.call.tool == "experiment")
    assert not exp.call.ok and exp.call.error is not None and exp.call.error.kind == "cancelled", exp
    holders, reservations = coordinator_state(fleet.coordinator)
    assert not any(holders.values()) and reservations == [], (holders, reservations)
