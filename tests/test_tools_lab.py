"""build -> flash -> fingerprint_verify -> associate -> lab_status against the vlab, over real
SSH, through the same runner every door uses."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from labwarden.core.devtext import unmark
from labwarden.lab.config import LabProfile
from labwarden.vlab import control, tuning
from labwarden.vlab.layout import VlabLayout

from .tooling import baseline, call, ok

pytestmark = pytest.mark.anyio




def _release(layout: VlabLayout) -> str:
    return layout.openwrt_release.read_text()


def _patch_from_edit(layout: VlabLayout, tmp: Path, file: str, old: str, new: str) -> Path:
    """A real git diff against the firmware repo, with one edit."""
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(layout.src), str(clone)], check=True)
    path = clone / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    diff = subprocess.run(["git", "-C", str(clone), "diff"], capture_output=True, text=True,
                          check=True).stdout
    out = layout.data_dir / "patches" / f"{tmp.name}.patch"  # where submitted patches live
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(diff)
    return out


async def test_baseline_verifies_and_status_reports_it(lab: VlabLayout) -> None:
    res = await ok(lab, "fingerprint_verify", {"build_id": baseline(lab)})
    assert res["verified"] and res["overlay_empty"] and res["mismatches"] == []
    t0 = time.monotonic()
    st = await ok(lab, "lab_status")
    wall_ms = (time.monotonic() - t0) * 1000
    assert st["fingerprint_verified"] and st["board_health"] == "good"
    assert unmark(st["running_version"]).split()[1] == unmark(res["git_hash_running"])
    assert {k["name"] for k in st["knobs"]} == {"governor", "boost", "topology", "procmgr"}
    assert 0 < st["rtt_ms"] < wall_ms  # one round trip of the call's many


async def test_lab_status_runs_version_only_when_the_profile_says_it_answers(lab: VlabLayout) -> None:
    """README: `--version` is never run on the DUT unless `[target] prints_git_hash` is set (a
    new user's lab_status ran it with the key off)."""
    prof = LabProfile.from_file(lab.lab_toml)
    quiet = prof.model_copy(update={"target": prof.target.model_copy(update={"prints_git_hash": False})})
    rec = await call(lab, "lab_status", profile=quiet)
    assert rec.ok and rec.result is not None, rec.error
    assert rec.result["target_pid"] and rec.result["running_version"] is None
    assert (await ok(lab, "lab_status"))["running_version"]  # the vlab's profile declares it


async def test_build_is_content_addressed_with_symfs(lab: VlabLayout) -> None:
    first = await ok(lab, "build", {"patches": ["0901"]})
    again = await ok(lab, "build", {"patches": ["0901"]})
    assert not first["cached"] and again["cached"]
    assert again["build_id"] == first["build_id"]
    assert first["build_id"] != baseline(lab)
    lib = next(a for a in first["artifacts"] if a["name"] == "libsta.so")
    debug = Path(first["symfs"]) / "usr/lib/debug/.build-id" / lib["build_id"][:2] / \
        f"{lib['build_id'][2:]}.debug"
    assert debug.is_file()
    assert (Path(first["symfs"]) / lib["path"].lstrip("/")).is_file()
    out = subprocess.run(["readelf", "-S", lib["path"] and str(Path(first["image"]).parent /
                          "stage/rootfs/usr/lib/libsta.so")], capture_output=True, text=True)
    assert ".debug_info" not in out.stdout, "deploy files are stripped"


async def test_unknown_patch_names_the_known_ones(lab: VlabLayout) -> None:
    rec = await call(lab, "build", {"patches": ["0999"]})
    assert not rec.ok and rec.error is not None
    assert rec.error.kind == "build" and "0999" in " ".join(rec.error.lines)
    assert rec.error.remedy is not None and "0901" in rec.error.remedy


async def test_patch_that_does_not_apply_returns_failing_lines(lab: VlabLayout,
                                                              tmp_path: Path) -> None:
    bad = lab.data_dir / "patches" / "stale.patch"
    good = _patch_from_edit(lab, tmp_path, "wld.c", "#include", "#include  ")
    bad.write_text(good.read_text().replace("#include", "#inclu_de_gone", 1))
    rec = await call(lab, "build", {"patches": [str(bad)]})
    assert not rec.ok and rec.error is not None and rec.error.kind == "build"
    assert "stale.patch" in rec.error.message
    assert any("patch" in ln for ln in rec.error.lines)


async def test_code_that_does_not_compile_returns_compiler_errors(lab: VlabLayout,
                                                                 tmp_path: Path) -> None:
    broken = _patch_from_edit(lab, tmp_path, "wld.c", "#include", "this is not C;\n#include")
    rec = await call(lab, "build", {"patches": [str(broken)]})
    assert not rec.ok and rec.error is not None and rec.error.kind == "build"
    assert rec.error.message.startswith("compile failed")
    assert any("wld.c" in ln and "error" in ln for ln in rec.error.lines)


async def test_flash_patched_not_bumped_is_caught_by_fingerprint(lab: VlabLayout) -> None:
    base = baseline(lab)
    patched = (await ok(lab, "build", {"patches": ["0901"]}))["build_id"]
    release_before = _release(lab)
    flashed = await ok(lab, "flash", {"build_id": patched})
    assert flashed["flashed"] and flashed["overlay_wiped"]
    assert _release(lab) == release_before, "a patched image does not bump DISTRIB_REVISION"

    good = await ok(lab, "fingerprint_verify", {"build_id": patched})
    assert good["verified"]
    stale = await ok(lab, "fingerprint_verify", {"build_id": base})
    assert not stale["verified"]
    assert stale["release_revision"] == good["release_revision"], "the release file cannot tell"
    bad_files = {unmark(m["path"]) for m in stale["mismatches"] if m["check"] == "sha256"}
    assert str(lab.rootfs / "usr/lib/libsta.so") in bad_files
    assert any(m["check"] == "git_hash" for m in stale["mismatches"])
    st = await ok(lab, "lab_status")
    assert st["flashed_build"] == patched


async def test_overlay_leftover_fails_verification(lab: VlabLayout) -> None:
    current = (await ok(lab, "lab_status"))["flashed_build"]
    shadow = lab.overlay / "usr/lib/libsta.so"
    shadow.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(lab.rootfs / "usr/lib/libsta.so", shadow)
    try:
        control.restart_services(lab.root)
        res = await ok(lab, "fingerprint_verify", {"build_id": current})
        assert not res["verified"] and not res["overlay_empty"]
        assert str(shadow) in [unmark(f) for f in res["overlay_files"]]
        checks = {(m["check"], unmark(m["path"])) for m in res["mismatches"]}
        assert ("overlay", str(shadow)) in checks
        assert any(c == "mapped" for c, _ in checks), "stad maps the overlay copy"
    finally:
        shadow.unlink()
        control.restart_services(lab.root)
    assert (await ok(lab, "fingerprint_verify", {"build_id": current}))["verified"]


async def test_associate_even_split_and_cleanup(lab: VlabLayout) -> None:
    tuning.pin(lab)  # flashing rebooted the DUT; topology back to all six radios
    control.restart_services(lab.root)
    for n in (18, 60, 114):
        res = await ok(lab, "associate", {"stations": n})
        assert res["associated"] == res["datamodel_count"] == n
        assert res["per_radio"] == [n // 6] * 6 and res["even_split"]
    res = await ok(lab, "associate", {"per_radio": 3})
    assert res["datamodel_count"] == 18
    res = await ok(lab, "associate", {"stations": 0})
    assert res["datamodel_count"] == 0 and res["per_radio"] == [0] * 6


async def test_associate_asserts_the_topology_before_holding(lab: VlabLayout) -> None:
    """A reboot drifted the topology (scaling VAPs off, channels unpinned). Where [policy] heal
    does not allow healing it, associate refuses and holds nothing; where it does, associate
    heals it first. Either way no client is split over a drifted set of radios."""
    control.reboot(lab.root)
    prof = LabProfile.from_file(lab.lab_toml)
    strict = prof.model_copy(update={"policy": prof.policy.model_copy(
        update={"heal": [h for h in prof.policy.heal if h != "topology"]})})
    rec = await call(lab, "associate", {"stations": 18}, profile=strict)
    assert rec.error is not None and rec.error.kind == "refused", rec.error
    assert rec.error.code == "topology_drifted" and "VAPs disabled" in rec.error.message
    st = await ok(lab, "lab_status")
    assert any(unmark(p).startswith("topology:") for p in st["problems"])
    assert (st["associated"] or {}).get("total") == 0
    # releasing never needs the topology: nothing to split
    assert (await call(lab, "associate", {"stations": 0}, profile=strict)).ok
    res = await ok(lab, "associate", {"stations": 18})
    assert res["datamodel_count"] == 18 and res["per_radio"] == [3] * 6 and res["even_split"]
    assert any(unmark(c).endswith(".disabled 1 -> 0") for c in res["healed"]), res["healed"]
    st = await ok(lab, "lab_status")
    assert not any(unmark(p).startswith("topology:") for p in st["problems"])
    assert any(unmark(p).startswith("governor:") for p in st["problems"]), \
        "associate heals only the topology"
    await ok(lab, "associate", {"stations": 0})


async def test_invalid_inputs_name_the_field(lab: VlabLayout) -> None:
    rec = await call(lab, "associate", {"stations": 6, "per_radio": 1})
    assert rec.error is not None and rec.error.kind == "invalid_input"
    assert "exactly one of stations or per_radio" in rec.error.message
    rec = await call(lab, "associate", {"stations": -1})
    assert rec.error is not None and "stations" in rec.error.message
    rec = await call(lab, "flash", {"build_id": "deadbeef"})
    assert rec.error is not None and rec.error.kind == "invalid_input"
    assert "build_id" in rec.error.message and baseline(lab) in (rec.error.remedy or "")
    rec = await call(lab, "flash", {"build_id": "../../etc"})
    assert rec.error is not None and rec.error.kind == "refused"
    assert rec.error.code == "unsafe_argument" and "build_id" in rec.error.message
