"""symbolize against a real vlab: real perf record of stad at 114 stations, real perf script,
real inferno, through the runner every door uses. Plus the folded-stack definitions on a fixture."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from labwarden.core.conditions import WindowConditions
from labwarden.core.measurements import MeasurementRecord, Window
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.host import folded as fl
from labwarden.lab.host import symfs as sf
from labwarden.lab.host.binaries import which
from labwarden.runtime.session import open_lab
from labwarden.tools import measure as measure_tool
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout

from .ci_skips import missing
from .tooling import baseline, call, ok

pytestmark = pytest.mark.anyio
DATA = Path(__file__).parent / "data"
TOWER = ["getStationStats", "wld_vap_sync_assoclist", "wld_ad_syncInfo", "dm_finalize_transaction"]
PERF_RECORD = [a for a in measure_tool.PERF_RECORD if a != "--buildid-mmap"]
"""The measure tool's own flags; --buildid-mmap is added per recording (_perf_record)."""



# -- folded-stack definitions (no lab) --------------------------------------------------------

def test_folded_definitions_on_fixture() -> None:
    f = fl.Folded.read(DATA / "symbolize_small.folded")
    st = fl.stats(f)
    assert f.samples == 100
    assert st.unknown_pct == 5.0  # leaf unresolved: only the [libc.so.6] leaf
    assert st.stacks_with_unknown_pct == 20.0  # [libc.so.6] x2 lines + [unknown]
    assert st.unknown_frames_pct == round(100 * 20 / 520, 3)  # comm frame excluded
    assert (st.depth.mean, st.depth.p95, st.depth.max) == (5.2, 6, 6)
    assert fl.function_shares(f, ["recurse", "wld_ad_syncInfo", "nope"]) == {
        "recurse": (10.0, 10.0), "wld_ad_syncInfo": (60.0, 10.0), "nope": (0.0, 0.0)}
    assert [s.frame for s in fl.dominant_path(f)] == ["stad", "_start", "main", *TOWER]
    lines = fl.tree_lines(f, top=40)
    assert lines[0] == " 100.0%    0.0%  stad > _start"
    assert "  60.0%   10.0%        wld_vap_sync_assoclist > wld_ad_syncInfo" in lines
    assert len(fl.tree_lines(f, top=3)) == 3
    assert not fl.unresolved("stad") and fl.unresolved("[unknown]") and fl.unresolved("[vdso]")


# -- a real measurement -----------------------------------------------------------------------

def _perf_record(layout: VlabLayout, out: Path, seconds: int, buildid_mmap: bool) -> None:
    pid = (layout.run_dir / "stad.pid").read_text().strip()
    extra = ["--buildid-mmap"] if buildid_mmap else []
    res = subprocess.run(["perf", *PERF_RECORD, *extra, "-p", pid, "-o", str(out), "--",
                          "sleep", str(seconds)], capture_output=True, text=True)
    if res.returncode != 0:
        if "perf_event_paranoid" in res.stderr or "Permission" in res.stderr:
            missing(f"perf record is not permitted here: {res.stderr.strip()[-200:]}")
        raise AssertionError(res.stderr)


def record_profile(layout: VlabLayout, build_id: str, stations: int = 114, seconds: int = 5,
                   buildid_mmap: bool = True) -> str:
    """A MeasurementRecord like `measure` writes: perf.data + kallsyms as artifacts of the record."""
    store = RecordStore(layout.data_dir)
    rid = store.new_id("prof")
    art = store.artifact_dir(rid)
    control.associate(layout.root, stations)
    time.sleep(2)
    t0 = datetime.now(UTC)
    data = art / "rep0.perf.data"
    _perf_record(layout, data, seconds, buildid_mmap)
    shutil.copyfile("/proc/kallsyms", art / "kallsyms")
    cond = WindowConditions(build_id=build_id, fingerprint_verified=True, governors=[], boost="",
                            clk_tck=100, vaps_enabled=[], channels={}, stations=stations,
                            host=os.uname().nodename, target="stad",
                            perf=" ".join(PERF_RECORD), labwarden="test")
    win = Window(rep=0, started_at=t0, duration_s=seconds, cpu_pct=0.0, cpu_series=[],
                 rss_kb=0, datamodel_start=stations, datamodel_end=stations,
                 perf_data=str(data), perf_bytes=data.stat().st_size, conditions=cond)
    store.save("prof", rid, MeasurementRecord(
        id=rid, stations=stations, window_s=seconds, build_id=build_id,
        target_pid=int((layout.run_dir / "stad.pid").read_text()), windows=[win],
        kallsyms=str(art / "kallsyms")))
    return rid


@pytest.fixture(scope="module")
def lab(lab: VlabLayout) -> VlabLayout:
    """The shared module vlab (conftest), when perf is there to record it."""
    if shutil.which("perf") is None:
        missing("perf not installed (apt-get install linux-perf)")
    return lab


@pytest.fixture(scope="module")
def prof114(lab: VlabLayout) -> str:
    return record_profile(lab, baseline(lab))


async def test_dominant_path_is_the_syncinfo_tower(lab: VlabLayout, prof114: str) -> None:
    rec = await call(lab, "symbolize", {"profile_id": prof114})
    assert rec.ok, rec.error
    res = rec.result
    assert res is not None and not res["cached"]
    path = [s["frame"] for s in res["dominant_path"]]
    i = path.index("getStationStats")
    assert path[i:i + 4] == TOWER, path
    share = res["dominant_path"][i + 3]["total_pct"]
    print(f"\ndominant path @114: {' -> '.join(TOWER)} = {share:.1f}% of {res['samples']} samples; "
          f"unknown_pct {res['unknown_pct']}% (frames {res['unknown_frames_pct']}%, stacks "
          f"{res['stacks_with_unknown_pct']}%); depth {res['depth']}; first run {rec.duration_s}s")
    print("\n".join(res["tree"]))
    assert share > 15.0
    assert res["unknown_pct"] <= 1.0 and res["stacks_with_unknown_pct"] <= 1.0
    assert res["buildids_recorded"] and res["symfs_missing"] == []
    assert len(json.dumps(res)) < 8000
    assert len(res["tree"]) <= 25
    assert Path(res["svg"]).read_text().lstrip().startswith("<?xml")

    again = await call(lab, "symbolize", {"profile_id": prof114, "top": 40})
    assert again.ok and again.result is not None and again.result["cached"]
    assert again.result["samples"] == res["samples"] and len(again.result["tree"]) <= 40
    print(f"cached re-symbolize: {again.duration_s * 1000:.1f} ms")
    assert again.duration_s < rec.duration_s / 5  # no perf script, no inferno: read back


async def test_folded_equals_the_plain_pipe(lab: VlabLayout, prof114: str) -> None:
    """STYLE #12: our folded file is byte-identical to `perf script ... | inferno-collapse-perf`."""
    res = await ok(lab, "symbolize", {"profile_id": prof114})
    out = Path(res["folded"]).parent
    store = RecordStore(lab.data_dir)
    perf_data = store.artifact_dir(prof114) / "rep0.perf.data"
    argv = sf.script_argv("perf", perf_data, Path(res["symfs"]),
                          store.artifact_dir(prof114) / "kallsyms", out / "buildid-empty")
    shell = subprocess.run(["sh", "-c", '"$@" 2>/dev/null | "$0"', which("inferno-collapse-perf"),
                            *argv], capture_output=True, check=True)
    assert shell.stdout == Path(res["folded"]).read_bytes()
    assert shell.stdout.count(b"\n") > 10


async def test_a_mismatched_build_id_is_never_accepted(lab: VlabLayout, tmp_path: Path) -> None:
    libc = next(p for p in ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6")
                if Path(p).exists())
    async with open_lab(LabProfile.from_file(lab.lab_toml)) as ctx:
        got = await sf.assemble(ctx.device, [sf.RecordedDso(build_id="ab" * 20, path=libc)],
                                tmp_path / "symfs", tmp_path / "cache", None, Path("/proc/kallsyms"))
    assert got.entries == [] and got.missing[0].path == libc
    assert "build-id mismatch" in got.missing[0].reason
    assert not (tmp_path / "symfs" / libc.lstrip("/")).exists()


async def test_missing_inferno_names_the_remedy(lab: VlabLayout, prof114: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from labwarden.tools import symbolize

    monkeypatch.setattr(symbolize, "which", lambda name: None if "inferno" in name else which(name))
    rec = await call(lab, "symbolize", {"profile_id": prof114})
    assert not rec.ok and rec.error is not None and rec.error.kind == "tool"
    assert "inferno-flamegraph" in rec.error.message and "make setup" in (rec.error.remedy or "")


async def test_0905_target_is_at_zero_and_baseline_diff(lab: VlabLayout, prof114: str) -> None:
    built = await ok(lab, "build", {"patches": ["0905"]})
    await ok(lab, "flash", {"build_id": built["build_id"]})
    # recorded as `measure` does today: -z without --buildid-mmap keeps no build-ids
    p0905 = record_profile(lab, built["build_id"], buildid_mmap=False)
    res = await ok(lab, "symbolize", {"profile_id": p0905, "baseline_profile_id": prof114,
                                      "functions": ["hal_get_all_stations_bulk"]})
    fn = res["functions"][0]
    print(f"\n0905 @114: hal_get_all_stations_bulk total {fn['total_pct']}% (defined in "
          f"{fn['defined_in']}); unknown_pct {res['unknown_pct']}%; deltas {res['top_deltas'][:3]}")
    assert fn == {"name": "hal_get_all_stations_bulk", "total_pct": 0.0, "self_pct": 0.0,
                  "defined_in": "libsta.so"}
    assert not res["buildids_recorded"] and any("no build-ids" in w for w in res["warnings"])
    assert res["top_deltas"] and Path(res["diff_svg"]).is_file()
    assert not any(fl.unresolved(d["symbol"]) for d in res["top_deltas"])
    assert res["unknown_pct"] <= 1.0 and res["stacks_with_unknown_pct"] <= 1.0
    assert len(json.dumps(res)) < 8000
