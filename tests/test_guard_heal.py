"""With healing on, a reboot's drift is healed before a sweep -- recorded, then measured."""

from __future__ import annotations

import pytest

from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import control, tuning
from labwarden.vlab.layout import VlabLayout

from .tooling import baseline

pytestmark = pytest.mark.anyio




async def test_sweep_after_reboot_heals_and_runs(lab: VlabLayout) -> None:
    control.reboot(lab.root)
    drifted = tuning.read_state(lab)
    assert drifted.boost and set(drifted.governors) == {"schedutil"} and drifted.vaps_disabled
    profile = LabProfile.from_file(lab.lab_toml)
    assert set(profile.policy.heal) >= {"governor", "boost", "topology"}
    async with open_lab(profile, client="test") as ctx:
        assert (await call_tool(ctx, "fingerprint_verify", {"build_id": baseline(lab)})).ok
        rec = await call_tool(ctx, "sweep", {"densities": [6, 18], "reps": 2, "window_s": 2,
                                             "perf": False})
        sid = ctx.session_id
    assert rec.ok, rec.error
    assert rec.result is not None
    points = rec.result["points"]
    assert [p["per_radio"] for p in points] == [[1] * 6, [3] * 6], "all six radios back"
    assert points[0]["cpu_mean"] < points[1]["cpu_mean"]
    healed = tuning.read_state(lab)
    assert set(healed.governors) == {"performance"} and not healed.boost and not healed.vaps_disabled
    assert sid is not None
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        bodies = [e.event.model_dump() for e in store.events(sid)]
    heals = [b for b in bodies if b["kind"] == "guard_decision" and b["decision"] == "heal"]
    assert len(heals) == 1 and heals[0]["tool"] == "sweep"
    changes = " | ".join(heals[0]["changes"])
    assert "scaling_governor schedutil -> performance" in changes
    assert "boost 1 -> 0" in changes and "wireless.vap3.disabled 1 -> 0" in changes
    assert "wireless.radio0.channel auto -> " in changes
    call = next(b for b in bodies if b["kind"] == "tool_called" and b["call"]["tool"] == "sweep")
    assert call["conditions"]["fingerprint_verified"] is True
    assert set(call["conditions"]["governors"]) == {"performance"}


async def test_associate_heals_the_topology_through_the_guard(lab: VlabLayout) -> None:
    """associate heals the radios it splits clients over itself (nothing else): through the
    guard, so the heal is a guard decision under its call -- and in the report's healed list --
    while the governor and boost drift stays for the measuring tools' guard to heal."""
    from labwarden.core.events import GuardDecision, ToolCalled
    from labwarden.report.data import collect

    control.reboot(lab.root)
    profile = LabProfile.from_file(lab.lab_toml)
    async with open_lab(profile, client="test") as ctx:
        rec = await call_tool(ctx, "associate", {"stations": 6})
        assert rec.ok, rec.error
        assert (await call_tool(ctx, "associate", {"stations": 0})).ok
        sid = ctx.session_id
    state = tuning.read_state(lab)
    assert not state.vaps_disabled and set(state.governors) == {"schedutil"}  # topology only
    assert sid is not None
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        events = [e.event for e in store.events(sid)]
        healed = collect(store, sid, lab.data_dir, "t").healed
    call = next(e for e in events if isinstance(e, ToolCalled) and e.call.tool == "associate")
    heals = [e for e in events if isinstance(e, GuardDecision) and e.decision == "heal"]
    assert len(heals) == 1 and heals[0].tool == "associate" and heals[0].parent_id == call.call.id
    assert any("wireless.vap3.disabled 1 -> 0" in c for c in heals[0].changes)
    assert not any("scaling_governor" in c for c in heals[0].changes)
    assert set(heals[0].changes) <= set(healed)
