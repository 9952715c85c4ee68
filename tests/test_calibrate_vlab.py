"""`calibrate` on a real vlab through the runner every door uses, and the overnight loop's
refusal of a night its rule cannot decide (agent/calibrated.py).

Short windows (2 s) and a cap of 5 windows per arm keep each test well under a minute: the tool's
own recording is 10 windows, the loop's (its default, 2 x 5 + 6) 16. Measured: the numbers come
from the vlab's windows, so the module runs in the measured phase of `make test`."""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labwarden.agent.loop import CONFIG, STATE
from labwarden.cli.app import app
from labwarden.core.calibration import CalibrationRecord, calibrate, noise, rule_of
from labwarden.core.call import ToolCallRecord
from labwarden.core.events import Note, ToolCalled
from labwarden.core.measurements import MeasurementRecord
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.results.calibrate import CalibrateOutput
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import firmware
from labwarden.vlab.layout import VlabLayout

from .fleet_fixtures import with_decision

runner = CliRunner()
QUICK = {"window_s": "2.0", "max_windows": "5", "min_effect_pct": "25.0"}
"""A rule for a quick test on a loaded host: 2 s windows, looks at 3 and 5 windows per arm, and
an effect worth keeping of 25% -- decidable on the vlab's few % per window."""
TINY = {**QUICK, "min_effect_pct": "0.5"}
"""The same with an effect no 2 s window of this lab decides in 5 windows."""


@pytest.fixture(scope="module")
def quick(lab: VlabLayout) -> Path:
    return with_decision(lab.lab_toml, QUICK, "lab-cal-quick.toml")


@pytest.fixture(scope="module")
def calibrated(quick: Path) -> tuple[ToolCallRecord, ToolCallRecord, str]:
    """On the module's fresh vlab: calibrate refused before the board is verified, then the
    baseline verified and 10 windows calibrated. (the refusal, the calibration, the session)"""
    async def run() -> tuple[ToolCallRecord, ToolCallRecord, str]:
        prof = LabProfile.from_file(quick)
        async with open_lab(prof, client="test") as ctx:
            refused = await call_tool(ctx, "calibrate", {"windows": 10})
            verified = await call_tool(ctx, "fingerprint_verify", {"build_id": prof.build.baseline})
            assert verified.ok, verified.error
            made = await call_tool(ctx, "calibrate", {"windows": 10, "draws": 200})
            assert ctx.session_id is not None
            return refused, made, ctx.session_id

    return asyncio.run(run())


def _loop(lab: Path, out: Path, *extra: str) -> tuple[int, str]:
    patches = out.parent / "candidates"
    patches.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(next(firmware.patches_package_dir().glob("0905-*.patch")), patches / "0905.patch")
    res = runner.invoke(app, ["loop", "--lab", str(lab), "--planner", "patches", "--patches",
                              str(patches), "--max-turns", "0", "--out", str(out), *extra])
    return res.exit_code, res.output


def _newest_loop(prof: LabProfile) -> list[object]:
    """The events of the newest loop session."""
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        sid = next(s.id for s in store.sessions() if s.client == "loop")
        return [e.event for e in store.events(sid)]


def test_calibrate_stores_its_windows_and_numbers_that_follow_from_them(
        quick: Path, calibrated: tuple[ToolCallRecord, ToolCallRecord, str]) -> None:
    refused, made, sid = calibrated
    assert refused.error is not None and refused.error.code == "fingerprint_unverified"
    assert made.ok and made.result is not None, made.error
    out = CalibrateOutput.model_validate(made.result)
    prof = LabProfile.from_file(quick)
    rec = RecordStore(prof.data_dir()).load("cal", out.calibration_id, CalibrationRecord)
    # the conditions: the verified baseline, the densest point, the profile's rule and window
    assert rec.build_id == out.build_id == prof.build.baseline and rec.place is None
    assert rec.stations == load_drivers.points(prof)[-1] and rec.workload == out.workload
    assert rec.rule == rule_of(prof.decision, prof.policy.budgets.flashes_per_hour) == out.rule
    assert rec.window_s == 2.0
    assert rec.design == out.design and rec.switch_s == out.switch_s
    # the windows are the measurements' own, in the order taken
    windows = [w.cpu_pct for pid in rec.profile_ids
               for w in RecordStore(prof.data_dir()).load("prof", pid, MeasurementRecord).windows]
    assert rec.values == windows and len(windows) == 10 and len(rec.offsets_s) == 10
    assert rec.offsets_s[0] == 0 and rec.offsets_s == sorted(rec.offsets_s)
    # and the numbers follow from them: the noise, and the whole simulation (its draws seeded)
    assert out.noise == noise(rec.values, rec.offsets_s, 2.0)
    assert out.noise.mean == round(statistics.fmean(windows), 4)
    assert out.noise.sd == round(statistics.stdev(windows), 4)
    again = calibrate(rec.values, rec.offsets_s, rec.rule, interleave=rec.interleave,
                      switch_s=rec.switch_s, time=rec.result.lab_time, drift_check=rec.drift_check,
                      draws=rec.draws, seed=rec.seed)
    assert again == rec.result
    assert out.aa.draws == min(200, out.distinct_starts)
    assert out.decidable == (out.at_min_effect.improved_pct >= 90)
    assert f"noise {out.noise.cv_pct:.2f}% per 2 s window (10 windows" in out.summary
    assert f"finds a 25% effect in {out.at_min_effect.improved_pct:.0f}% of draws" in out.summary
    # every window a nested measure call under the calibration's
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        calls = [e.event for e in store.events(sid) if isinstance(e.event, ToolCalled)]
    nested = [c for c in calls if c.parent_id == made.id]
    assert {c.call.tool for c in nested} >= {"measure", "associate"}
    assert sorted(str((c.call.result or {})["profile_id"]) for c in nested
                  if c.call.tool == "measure") == sorted(rec.profile_ids)


def test_the_loop_refuses_a_night_its_rule_cannot_decide(lab: VlabLayout, tmp_path: Path) -> None:
    tiny = with_decision(lab.lab_toml, TINY, "lab-cal-tiny.toml")
    code, output = _loop(tiny, tmp_path / "night")
    text = " ".join(output.split())
    assert code == 1, output
    assert "the loop refuses to start: [decision] min_effect_pct = 0.5 is not decidable" in text
    assert "[decision]" in output.split("refuses to start")[1] and "remedy:" in text
    assert ("min_effect_pct = " in output.split("is not decidable")[1]
            or "max_windows = " in output), output  # the suggested [decision], to paste
    events = _newest_loop(LabProfile.from_file(tiny))
    calls = [e.call for e in events if isinstance(e, ToolCalled) and e.parent_id is None]
    assert [c.tool for c in calls][-1] == "calibrate" and calls[-1].ok  # measured first, logged
    notes = [e for e in events if isinstance(e, Note)]
    assert any("refuses to start" in n.text for n in notes)
    assert not any(n.author in (STATE, CONFIG) for n in notes)  # the night never began
    assert not (tmp_path / "night" / "summary.md").exists()


def test_a_night_rests_on_the_calibration_that_fits_it(
        quick: Path, calibrated: tuple[ToolCallRecord, ToolCallRecord, str], tmp_path: Path) -> None:
    """The fixture's calibration (this profile, this base, minutes old) is the night's: the loop
    measures nothing before it starts -- or, on a host too loaded for even this rule, refuses on
    that same record."""
    out = CalibrateOutput.model_validate(calibrated[1].result)
    code, output = _loop(quick, tmp_path / "night")
    events = _newest_loop(LabProfile.from_file(quick))
    calls = [e.call.tool for e in events if isinstance(e, ToolCalled)]
    assert "calibrate" not in calls and "measure" not in calls, calls
    if not out.decidable:  # the record says so: the same refusal, without measuring again
        assert code == 1 and out.calibration_id in output, output
        return
    assert code == 0 and "stopped: max_turns" in output, output
    config = json.loads(next(e.text for e in events if isinstance(e, Note) and e.author == CONFIG))
    assert config["calibration"] == {"skipped": False, "record": out.calibration_id, "max_age_h": 24.0}
    summary = (tmp_path / "night" / "summary.md").read_text()
    assert f"- **Calibration:** {out.calibration_id} (" in summary and "is decidable" in summary


def test_skipping_the_calibration_is_written_down(lab: VlabLayout, tmp_path: Path) -> None:
    tiny = with_decision(lab.lab_toml, TINY, "lab-cal-tiny.toml")
    code, output = _loop(tiny, tmp_path / "night", "--skip-calibration")
    assert code == 0 and "stopped: max_turns" in output, output
    events = _newest_loop(LabProfile.from_file(tiny))
    assert "calibrate" not in [e.call.tool for e in events if isinstance(e, ToolCalled)]
    config = json.loads(next(e.text for e in events if isinstance(e, Note) and e.author == CONFIG))
    assert config["calibration"]["skipped"] is True
    assert any(isinstance(e, Note) and "calibration skipped (--skip-calibration)" in e.text
               for e in events)
    summary = (tmp_path / "night" / "summary.md").read_text()
    assert "- **Calibration:** calibration skipped (--skip-calibration)" in summary
