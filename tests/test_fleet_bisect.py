"""bisect on a real fleet of two vlab places (`vlab up --places 2`: a real labgrid coordinator and
exporter): the vlab firmware's short history (tests/test_bisect.py's: five commits, one of
which brings back the per-sample static write-back) is split over both places -- the first
round tests two commits at once, one per place -- and the culprit is named; the transcript
shows both places measuring at the same time, and its audit passes.

No model: the call goes through the fleet's place pool (runtime/fleet.py), as the loop's do.
Everything is real -- coordinator, exporter, DUTs, builds, flashes, perf, guard, transcript.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

import pytest

from labwarden.core.events import ToolCalled
from labwarden.core.experiments import Bisection
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.host.builder import git
from labwarden.lab.host.builds import load_manifest
from labwarden.runtime.fleet import open_fleet
from labwarden.transcripts.audit import audit
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import firmware
from labwarden.vlab import fleet as vlab_fleet

from .fleet_fixtures import clean_lg_env, quick_profile, vlab_fleet_fixture  # noqa: F401 (autouse)

fleet = vlab_fleet_fixture(2, "fleetbisect")


def quick(info: vlab_fleet.FleetInfo) -> LabProfile:
    """tests/test_bisect.py's short rule: 2 s windows, one density (60), at most 7 windows."""
    return LabProfile.from_file(quick_profile(
        info, {"window_s": "2.0", "densities": "[60]", "max_windows": "7"}))


def _span(c: ToolCalled) -> tuple[float, float]:
    start = c.call.started_at
    return start.timestamp(), (start + timedelta(seconds=c.call.duration_s)).timestamp()


@pytest.mark.long  # two vlabs, builds for each, ~3-5 min; make test holds 30 minutes
def test_bisect_splits_the_range_over_two_places(fleet: vlab_fleet.FleetInfo) -> None:
    prof = quick(fleet)
    repo = Path(prof.build.repo).expanduser()
    first = git(repo, "rev-list", "--max-parents=0", "HEAD")
    t0 = time.monotonic()

    async def go() -> tuple[str, dict[str, object]]:
        async with open_fleet(prof) as (home, pool):
            rec = await pool.call("bisect", {"good": first, "bad": "HEAD"})
            assert rec.ok and rec.result, rec.error
            assert home.session_id is not None
            return home.session_id, rec.result

    sid, out = asyncio.run(go())
    print(f"fleet bisect: {time.monotonic() - t0:.1f} s")  # the duration, for the report (-s)
    assert out["outcome"] == "found", out
    assert out["first_bad_subject"] == firmware.REGRESSION
    assert out["first_bad"] == git(repo, "log", "--format=%H", "--grep", "^wld: sync", "HEAD")
    stored = RecordStore(prof.data_dir()).load("bis", str(out["bisect_id"]), Bisection)
    assert sorted(stored.places) == sorted(fleet.places), stored.places
    assert len(stored.commits) == len(firmware.HISTORY) - 1

    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        report = audit(store, sid)
        assert report.ok, report.problems
        assert "places" in report.checks
        calls = [e.event for e in store.events(sid) if isinstance(e.event, ToolCalled)]
    top = next(c for c in calls if c.call.tool == "bisect")
    under = [c for c in calls if c.parent_id == top.call.id]
    assert {c.place for c in under} == set(fleet.places), {c.place for c in under}
    here = top.place
    assert here is not None
    (other,) = set(fleet.places) - {here}
    # round 1 split the four candidates over both places: commits[0] here, commits[2] on the
    # other (tools/bisect.split(-1, 3, 2) == [0, 2]); the other place tested nothing else
    ends = {first, stored.commits[-1]}
    tested: dict[str | None, set[str]] = {}
    for c in under:
        if c.call.tool == "flash" and c.call.ok:
            commit = load_manifest(prof, c.call.args["build_id"]).base
            if commit not in ends:
                tested.setdefault(c.place, set()).add(commit)
    assert tested[other] == {stored.commits[2]}, tested
    assert stored.commits[0] in tested[here] and stored.first_bad in tested[here] | tested[other]
    # ... at the same time: a window on one place overlaps a window on the other
    windows = {p: [_span(c) for c in under if c.call.tool == "measure" and c.place == p]
               for p in fleet.places}
    assert windows[other], "no window measured on the second place"
    overlap = max(min(a1, b1) - max(a0, b0) for a0, a1 in windows[here] for b0, b1 in windows[other])
    assert overlap > 0, "the two places never measured at the same time"
