"""A fleet of one place (`vlab up --places 1`: a real labgrid coordinator and exporter, one vlab):
a bad place cleared by a person proves itself with a health check before its next call; a
power cycle of the place (the vlab DUT's own reboot: its process manager restarts every DUT
process) brings it back verified; and a keep is screened again on that place after a power
cycle, which the ledger says.

No model: the calls go through the fleet's place pool (runtime/fleet.py), as the loop's do.
Everything is real -- coordinator, exporter, DUT, guard, transcript, records.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import Note, ToolCalled
from labwarden.core.experiments import Experiment, PowerCycle
from labwarden.core.placehealth import HealthStore
from labwarden.core.records import RecordStore
from labwarden.lab.boardstate import BoardState
from labwarden.lab.config import LabProfile
from labwarden.lab.dut import procs
from labwarden.report.data import collect
from labwarden.report.render import render
from labwarden.runtime.fleet import open_fleet, place_dir
from labwarden.runtime.runner import call_tool
from labwarden.tools.powercycle import AUTHOR, power_cycle
from labwarden.transcripts.audit import audit
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import fleet as vlab_fleet

from .fleet_fixtures import clean_lg_env, quick_profile, vlab_fleet_fixture  # noqa: F401 (autouse)
from .patching import BULK, change

PLACE = "vlab-0"
fleet = vlab_fleet_fixture(1, "fleet1")
pytestmark = pytest.mark.long  # a fleet of its own (~15 s up); make test holds 30 minutes


def quick(info: vlab_fleet.FleetInfo) -> LabProfile:
    """The short [decision] of the fleet tests (tests/fleet_fixtures.QUICK: the offered-load
    gate widened, this is about the power cycle)."""
    return LabProfile.from_file(quick_profile(info))


def calls_and_notes(prof: LabProfile, sid: str) -> tuple[list[ToolCalled], list[Note]]:
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        report = audit(store, sid)
        assert report.ok, report.problems
        events = [e.event for e in store.events(sid)]
    return ([e for e in events if isinstance(e, ToolCalled)],
            [e for e in events if isinstance(e, Note)])


def test_a_cleared_place_proves_itself_before_its_next_call(fleet: vlab_fleet.FleetInfo) -> None:
    """The only place is bad: a call finds no good place. A person clears it (`lab clear-bad
    --place`); its board, which the guard had marked bad, is unknown now, so the next call there
    runs a health check first (flash the last verified image, fingerprint_verify it): the board
    and the place turn good, and the call runs."""
    prof = quick(fleet)
    data = prof.data_dir()
    assert prof.build.baseline is not None
    HealthStore(data).mark(PLACE, "bad", "the DUT does not answer (set by the test)")
    BoardState(board_health="bad", health_reason="health check failed at flash (set by the test)",
               flashed_build=prof.build.baseline,
               verified_build=prof.build.baseline).save(place_dir(data, PLACE))

    async def one_call() -> tuple[str, bool, str]:
        async with open_fleet(prof) as (home, pool):
            rec = await pool.call("lab_status", {})
            assert home.session_id is not None
            return home.session_id, rec.ok, rec.error.message if rec.error else ""

    _sid, ok, why = asyncio.run(one_call())
    assert not ok and "no good place left" in why and PLACE in why

    res = CliRunner().invoke(app, ["lab", "clear-bad", "--lab", str(prof.source), "--place", PLACE,
                                   "--reason", "checked by the test"])
    assert res.exit_code == 0, res.output
    assert HealthStore(data).get(PLACE).state == "unknown"
    assert BoardState.load(place_dir(data, PLACE)).board_health == "unknown"

    sid, ok, why = asyncio.run(one_call())
    assert ok, why
    assert HealthStore(data).get(PLACE).state == "good"
    assert BoardState.load(place_dir(data, PLACE)).board_health == "good"
    calls, _ = calls_and_notes(prof, sid)
    order = [(c.call.tool, c.place, c.call.ok) for c in calls if c.parent_id is None]
    assert order == [("flash", PLACE, True), ("fingerprint_verify", PLACE, True),
                     ("lab_status", PLACE, True)], order


def test_a_power_cycle_brings_the_place_back_verified(fleet: vlab_fleet.FleetInfo) -> None:
    """The vlab place's power cycle: its own `reboot` restarts every DUT process (a new target
    instance), the build that ran is fingerprint-verified again, and a `power-cycle` note names
    the place."""
    prof = quick(fleet)
    base = prof.build.baseline
    assert base is not None

    async def go() -> tuple[str, PowerCycle, Any, Any]:
        async with open_fleet(prof) as (home, pool), pool.session() as ctx:
            assert ctx.place_name == PLACE and home.session_id is not None
            rec = await call_tool(ctx, "fingerprint_verify", {"build_id": base})
            assert rec.ok and rec.result and rec.result["verified"], rec
            target = prof.target.process
            before = await procs.instance(ctx.device, target, ctx.profile.target.pidfile(target))
            cycle = await power_cycle(ctx)
            after = await procs.instance(ctx.device, target, ctx.profile.target.pidfile(target))
            assert ctx.peek_state().fingerprint_ok() and ctx.peek_state().verified_build == base
            return home.session_id, cycle, before, after

    sid, cycle, before, after = asyncio.run(go())
    assert cycle.done and cycle.verified == base and cycle.seconds is not None, cycle
    assert "process manager restarts every DUT process" in cycle.how
    assert before is not None and after is not None and after.pid != before.pid, (before, after)
    calls, notes = calls_and_notes(prof, sid)
    (note,) = [n for n in notes if n.author == AUTHOR]
    assert note.place == PLACE and json.loads(note.text)["place"] == PLACE
    verifies = [c for c in calls if c.call.tool == "fingerprint_verify"]
    assert len(verifies) == 2 and verifies[-1].ts > note.ts and verifies[-1].place == PLACE


def test_a_keep_on_one_place_is_screened_again_after_a_power_cycle(fleet: vlab_fleet.FleetInfo) -> None:
    """bulk-pull on the only place: decided improved, it is power-cycled and screened again on
    that place before it is kept; the ledger's reproduction says so."""
    prof = quick(fleet)

    async def go() -> tuple[str, str]:
        async with open_fleet(prof) as (home, pool):
            sub = await call_tool(home, "patch_submit", {"name": "bulk-pull", "diff": change("hal.c", *BULK)})
            assert sub.ok and sub.result, sub.error
            rec = await pool.call("experiment", {"patch": sub.result["patch_id"]})
            assert rec.ok and rec.result, rec.error
            assert home.session_id is not None
            return home.session_id, rec.result["experiment_id"]

    sid, eid = asyncio.run(go())
    exp = RecordStore(prof.data_dir()).load("exp", eid, Experiment)
    assert exp.place == PLACE
    rep = exp.reproduction
    assert rep is not None, f"not reproduced (first screening not a keep?): {exp.decision}: {exp.reason}"
    assert rep.same_place and rep.place == PLACE
    assert rep.power_cycle is not None and rep.power_cycle.done, rep.power_cycle
    assert rep.power_cycle.verified == exp.build_b  # B ran last (its full sweep) and came back
    assert rep.screening is not None and rep.screening.looks, rep
    assert f"on {PLACE} after a power cycle: " in exp.reason, exp.reason
    assert exp.decision == ("kept" if rep.reproduced else "dropped"), exp.reason
    calls, notes = calls_and_notes(prof, sid)
    (note,) = [n for n in notes if n.author == AUTHOR]
    assert note.place == PLACE
    top = next(c for c in calls if c.call.tool == "experiment")
    under = [c for c in calls if c.parent_id == top.call.id]
    # after the cycle: B verified again, then the second screening's windows, all on the place
    after = [c for c in under if c.ts > note.ts]
    assert after and after[0].call.tool == "fingerprint_verify" and after[0].call.ok, after[:1]
    assert any(c.call.tool == "measure" for c in after)
    assert {c.place for c in under} == {PLACE}
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        html = render(collect(store, sid, prof.data_dir(), "one place"))
    assert f"again on {PLACE} after a power cycle" in html
