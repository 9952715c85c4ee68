"""Stored records carry a format (core/records.py RECORD_FORMAT), as the transcript carries its
event schema version: a record written before formats existed reads as format 1, one of a newer
format or a damaged one is refused with an error naming the file and the remedy. Real files in a
temporary data dir, the real RecordStore, and the report and MCP browse readers over them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from labwarden.core.experiments import Experiment, FlameRef
from labwarden.core.measurements import MeasurementRecord, SweepPoint, SweepRecord
from labwarden.core.records import FORMAT_KEY, RECORD_FORMAT, RecordStore, RecordUnreadable
from labwarden.report import data as report_data
from labwarden.report import render
from labwarden.server import browse

OLD_PROFILE: dict[str, Any] = {
    "id": "prof-000000000001", "stations": 0, "window_s": 3, "build_id": None, "target_pid": 1,
    "windows": [{
        "rep": 0, "started_at": "2026-11-20T00:00:00Z", "duration_s": 3, "cpu_pct": 1.0,
        "cpu_series": [], "rss_kb": 1, "datamodel_start": None, "datamodel_end": None,
        "conditions": {"build_id": None, "fingerprint_verified": False, "governors": [],
                       "boost": "", "clk_tck": 100, "vaps_enabled": [], "channels": {},
                       "stations": 0, "host": "h", "target": "stad", "perf": None,
                       "labwarden": "old"}}]}
"""A measurement record as labwarden wrote it before records had a format (and before [2/6]: no
Window.kernel): no record_format key."""


def _sweep(sid: str = "swp-00000000000a", label: str = "baseline") -> SweepRecord:
    return SweepRecord(id=sid, label=label, started_at=datetime.now(UTC), window_s=3, reps=1,
                       build_id="b1", cleanup_count=0, points=[SweepPoint(
                           stations=18, profile_id="prof-000000000001", cpu_mean=10.0,
                           cpu_stdev=0.5, cpu_per_rep=[10.0], idle_cpu_mean=None, counters={},
                           rss_kb=1000, per_radio=[18], clients_held=True)])


def _plant(store: RecordStore, kind: str, rid: str, body: dict[str, Any]) -> Path:
    path = store.root / kind / f"{rid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))
    return path


def test_a_saved_record_carries_its_format_and_reads_back(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    rec = _sweep()
    path = store.save("swp", rec.id, rec)
    body = json.loads(path.read_text())
    assert body[FORMAT_KEY] == RECORD_FORMAT == 1
    assert store.load("swp", rec.id, SweepRecord) == rec


def test_a_record_written_before_formats_reads_as_format_1(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    _plant(store, "prof", "prof-000000000001", OLD_PROFILE)
    rec = store.load("prof", "prof-000000000001", MeasurementRecord)
    assert rec.windows[0].cpu_pct == 1.0 and rec.windows[0].kernel is None



def test_an_experiment_record_written_before_reads_its_flame_graph_as_a_model(tmp_path: Path) -> None:
    """Its flame graph was a plain dict (now a FlameRef, with the same keys), or an error."""
    store = RecordStore(tmp_path)
    exp: dict[str, Any] = {"id": "exp-000000000001", "patch": "0901", "ref": "HEAD",
                           "started_at": "2026-11-20T00:00:00Z", "decision": "kept", "reason": "r",
                           "flame": {"profile_id": "prof-000000000001", "key": "k", "svg": "/x.svg",
                                     "diff_svg": None, "stations": 114, "samples": 9,
                                     "unknown_pct": 0.5}}
    _plant(store, "exp", "exp-000000000001", exp)
    _plant(store, "exp", "exp-000000000002", {**exp, "id": "exp-000000000002",
                                               "flame": {"error": "no perf.data"}})
    got = store.load("exp", "exp-000000000001", Experiment)
    assert got.flame == FlameRef(profile_id="prof-000000000001", key="k", svg="/x.svg",
                                 stations=114, samples=9, unknown_pct=0.5)
    assert store.load("exp", "exp-000000000002", Experiment).flame == FlameRef(error="no perf.data")


@pytest.mark.parametrize("fmt", [RECORD_FORMAT + 1, 0, "1", None, True])
def test_a_record_of_another_format_is_refused_naming_the_file(tmp_path: Path, fmt: Any) -> None:
    store = RecordStore(tmp_path)
    rec = _sweep()
    path = store.save("swp", rec.id, rec)
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, FORMAT_KEY: fmt}))
    with pytest.raises(RecordUnreadable) as exc:
        store.load("swp", rec.id, SweepRecord)
    assert str(path) in exc.value.problem
    assert f"record format {fmt!r}" in exc.value.problem
    assert f"reads formats 1 to {RECORD_FORMAT}" in exc.value.problem
    assert "newer labwarden" in exc.value.remedy and "the `sweep` tool again" in exc.value.remedy
    assert exc.value.kind == "tool"


def test_a_damaged_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    path = _plant(store, "prof", "prof-000000000002", {**OLD_PROFILE, "windows": "none"})
    with pytest.raises(RecordUnreadable) as exc:
        store.load("prof", "prof-000000000002", MeasurementRecord)
    assert str(path) in exc.value.problem and "does not read as a MeasurementRecord (windows" \
        in exc.value.problem
    assert "the `measure` tool again" in exc.value.remedy
    path.write_text("{not json")
    with pytest.raises(RecordUnreadable, match="not JSON"):
        store.load("prof", "prof-000000000002", MeasurementRecord)


def test_mcp_browse_lists_a_newer_record_as_unreadable(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    good, newer = _sweep("swp-00000000000a", "baseline"), _sweep("swp-00000000000b", "later")
    store.save("swp", good.id, good)
    path = store.save("swp", newer.id, newer)
    path.write_text(json.dumps({**json.loads(path.read_text()), FORMAT_KEY: RECORD_FORMAT + 1}))
    listed = {r.name: r.description for r in browse._records(tmp_path, "sweeps")}
    assert listed["swp-00000000000b"] == "a record this labwarden cannot read"
    assert listed["swp-00000000000a"] != "a record this labwarden cannot read"


def test_the_report_leaves_out_a_newer_record_and_says_so(tmp_path: Path) -> None:
    """A sweep call whose record is of a newer format: the report is written without its curve
    and names the file."""
    from labwarden.core.call import ToolCallRecord
    from labwarden.core.events import ToolCalled
    from labwarden.results.sweep import SweepOutput
    from labwarden.transcripts.store import TranscriptStore

    store = RecordStore(tmp_path)
    good, newer = _sweep("swp-00000000000a", "baseline"), _sweep("swp-00000000000b", "later")
    store.save("swp", good.id, good)
    path = store.save("swp", newer.id, newer)
    path.write_text(json.dumps({**json.loads(path.read_text()), FORMAT_KEY: RECORD_FORMAT + 1}))
    _plant(store, "prof", "prof-000000000001", OLD_PROFILE)
    with TranscriptStore(tmp_path / "t.db") as ts:
        sid = ts.start_session("test")
        for rec in (good, newer):
            out = SweepOutput(sweep_id=rec.id, label=rec.label, build_id=rec.build_id,
                              points=rec.points, cleanup_count=0, idle_note=None)
            ts.append(sid, ToolCalled.of(ToolCallRecord(tool="sweep", args={}, ok=True,
                                                        result=out.model_dump(mode="json"))))
        d = report_data.collect(ts, sid, tmp_path, "t")
    assert [s.label for s in d.stages] == ["baseline"]
    assert len(d.unreadable) == 1 and str(path) in d.unreadable[0]
    html = render.render(d)
    assert 'id="unreadable"' in html and str(path) in html
