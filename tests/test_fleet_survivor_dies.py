"""A survivor's full sweeps moved to the place holding A's sweep, and that place's DUT dies
during them: the place is marked bad with the reason, nothing from its sweeps or gates is kept,
and the candidate is not kept (on two places no good place is left to reproduce it on: it is
dropped, saying so). Real fleet (coordinator, exporter, two pinned vlabs), real experiment; no
model -- the calls go through the fleet's place pool, as the loop's do.

Marked `long` (~2-3 minutes with its own fleet: it kills one of the fleet's DUTs)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from labwarden.core.experiments import Experiment
from labwarden.core.placehealth import HealthStore
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.transcripts.audit import audit
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import fleet as vlab_fleet

from .fleet_fixtures import (  # noqa: F401 (clean_lg_env: autouse)
    clean_lg_env,
    kill_place_when,
    last_rowid,
    quick_profile,
    sweep_a_on,
    vlab_fleet_fixture,
)
from .patching import BULK, change

fleet = vlab_fleet_fixture(2, "fleetdies")

SWEEP_POINT = 60
"""The first point of the quick rule's sweeps ([60, 114]): the screenings measure at 114 only,
so a measurement at 60 on the holder after the set-up is the survivor's sweep of B."""


@pytest.mark.long
def test_the_holder_dies_during_the_survivor_sweeps(fleet: vlab_fleet.FleetInfo) -> None:
    from labwarden.runtime.fleet import open_fleet
    from labwarden.runtime.runner import call_tool

    prof = LabProfile.from_file(quick_profile(fleet))
    first, holder = sorted(fleet.places)
    db = prof.data_dir() / "transcripts.db"
    killed: list[str] = []
    stop = threading.Event()

    async def go() -> tuple[str, list[Experiment]]:
        async with open_fleet(prof) as (home, pool):
            assert home.session_id is not None
            sub = await call_tool(home, "patch_submit", {"name": "bulk-pull-d",
                                                         "diff": change("hal.c", *BULK)})
            assert sub.ok and sub.result, sub
            await sweep_a_on(pool, holder, {first})

            def at_sweep(ev: dict[str, Any]) -> str | None:
                """The holder, once a measurement at SWEEP_POINT on it ends."""
                call = ev["call"]
                return holder if (call["tool"] == "measure" and ev.get("place") == holder and (
                    call.get("args") or {}).get("stations") == SWEEP_POINT) else None

            watcher = threading.Thread(target=kill_place_when, daemon=True, args=(
                db, last_rowid(db), fleet, at_sweep, killed, stop))
            watcher.start()
            exps = []
            try:
                for _ in range(3):  # until a survivor's sweep ran on the holder (a busy box
                    # can leave bulk-pull undecided at 9 windows, on either screening)
                    async with pool.session(exclude={holder}) as p:
                        assert p.place_name == first
                        rec = await call_tool(p, "experiment", {"patch": sub.result["patch_id"]})
                    assert rec.ok and rec.result, rec
                    exps.append(RecordStore(prof.data_dir()).load(
                        "exp", rec.result["experiment_id"], Experiment))
                    if killed:
                        break
            finally:
                stop.set()
                watcher.join(10)
            return home.session_id, exps

    sid, exps = asyncio.run(go())
    assert killed == [holder], [e.reason for e in exps]
    x = exps[-1]
    rep = x.reproduction
    assert x.verdict == "improved" and rep is not None, x.reason
    health = HealthStore(prof.data_dir()).all()
    assert health[holder].state == "bad", health
    assert "does not answer" in (health[holder].reason or "") and x.id in (health[holder].reason or "")
    assert first not in health or health[first].state != "bad", health
    # nothing kept from the dead place: no sweeps, no full-sweep gates, not kept
    assert x.decision == "dropped", x.reason
    assert x.sweep_a is None and x.sweep_b is None, (x.sweep_a, x.sweep_b)
    assert not any(g.evidence.startswith("full sweep: ") for g in x.gates), x.gates
    assert not rep.reproduced and rep.error and "no good place left" in rep.error, rep
    assert x.reason.startswith("did not reproduce on another place: "), x.reason
    with TranscriptStore(db) as store:
        report = audit(store, sid)
        assert report.ok, report.problems
