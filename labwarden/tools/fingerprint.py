"""fingerprint_verify: prove what runs on the DUT is the build, by binary fingerprint.

Read-only. Checks the running process's embedded git hash (asking the running image itself via
/proc/PID/exe), the sha256 of every deployed file read on the DUT, that the running process maps
the deployed files (not an overlay copy, not a replaced-but-still-running one), and that the
overlay is empty. A check that fails, or cannot be completed, withdraws every earlier
"verified" for this DUT. Never trusts DISTRIB_REVISION or package metadata: they lie when an image is
patched but not bumped (the revision is reported, marked as not used).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from labwarden.core.devtext import DeviceText
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.dut import procs
from labwarden.lab.host.builder import BuildManifest
from labwarden.tools.build import load_manifest
from labwarden.tools.context import LabContext

_HASH = re.compile(r"\b([0-9a-f]{7,40}|unknown)\b")


class FingerprintInput(ToolInput):
    build_id: str = Field(description="the build that should be running", examples=["0649198d591e4e52"])


class Mismatch(BaseModel):
    path: DeviceText
    check: str = Field(description="sha256 | git_hash | mapped | overlay | process")
    expected: str
    actual: DeviceText


class FingerprintOutput(BaseModel):
    verified: bool
    build_id: str
    git_hash_expected: str
    git_hash_running: DeviceText | None
    mismatches: list[Mismatch]
    overlay_empty: bool
    overlay_files: list[DeviceText] = Field(description="first files found in the overlay")
    release_revision: DeviceText | None = Field(
        None, description="DISTRIB_REVISION as the DUT reports it: shown, never trusted")


def _revoke(ctx: LabContext) -> None:
    """A failed or unfinished check proves nothing runs as verified: every earlier "verified"
    for this DUT is withdrawn (lab_status, the guard and the conditions then say unverified)."""
    state = ctx.state
    if state.verified_build is not None:
        state.verified_build = None
        state.verified_at = None
        ctx.save_state(state)


async def run(ctx: LabContext, inp: FingerprintInput) -> FingerprintOutput:
    manifest = load_manifest(ctx, inp.build_id)
    try:
        out = await _check(ctx, manifest)
    except BaseException:  # unreadable (DUT gone, a file missing) or cancelled: not verified
        _revoke(ctx)
        raise
    if out.verified:
        state = ctx.state
        state.flashed_build = manifest.build_id  # what runs is now proven, whoever flashed it
        state.verified_build = manifest.build_id
        state.verified_at = datetime.now(UTC)
        ctx.save_state(state)
    else:
        _revoke(ctx)
    return out


async def _check(ctx: LabContext, manifest: BuildManifest) -> FingerprintOutput:
    prof, dev = ctx.profile, ctx.device
    mismatches: list[Mismatch] = []

    proc = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    running_hash = None
    if proc is None:
        mismatches.append(Mismatch(path=prof.target.process, check="process",
                                   expected="running", actual="not running"))
    else:
        ver = await dev.run([f"/proc/{proc.pid}/exe", "--version"], timeout=10)
        m = _HASH.search(ver.stdout)
        running_hash = m.group(1) if m else ver.stdout.strip()[:80] or None
        if running_hash != manifest.git_hash:
            mismatches.append(Mismatch(path=f"/proc/{proc.pid}/exe", check="git_hash",
                                       expected=manifest.git_hash, actual=str(running_hash)))
        maps = (await dev.read_file(f"/proc/{proc.pid}/maps")).decode(errors="replace")
        mapped = {ln.split(None, 5)[5] for ln in maps.splitlines() if len(ln.split(None, 5)) == 6}
        exe = (await dev.run(["readlink", f"/proc/{proc.pid}/exe"])).stdout.strip()
        for art in manifest.artifacts:
            base = art.path.rsplit("/", 1)[-1]
            if art.name == prof.target.process:
                if exe != art.path:
                    mismatches.append(Mismatch(path=art.path, check="mapped", expected=art.path,
                                               actual=exe or "?"))
            elif art.name.endswith(".so") or ".so." in art.name:
                hits = sorted(p for p in mapped if p.rsplit("/", 1)[-1].startswith(base))
                if hits and hits != [art.path]:
                    mismatches.append(Mismatch(path=art.path, check="mapped", expected=art.path,
                                               actual=", ".join(hits)))

    sums = await dev.sha256([a.path for a in manifest.artifacts])
    for art in manifest.artifacts:
        actual = sums.get(art.path)
        if actual != art.sha256:
            mismatches.append(Mismatch(path=art.path, check="sha256", expected=art.sha256,
                                       actual=actual or "missing"))

    found = await dev.run(["find", prof.dut.paths.overlay, "-mindepth", "1", "-type", "f"])
    overlay_files = [ln for ln in found.stdout.splitlines() if ln.strip()]
    for path in overlay_files[:10]:
        mismatches.append(Mismatch(path=path, check="overlay", expected="absent", actual="present"))

    release = None
    try:
        text = (await dev.read_file(prof.dut.paths.release)).decode(errors="replace")
        m = re.search(r"DISTRIB_REVISION=['\"]?([^'\"\n]*)", text)
        release = m.group(1) if m else None
    except Exception:  # informational only: a missing release file proves nothing either way
        release = None

    verified = not mismatches
    return FingerprintOutput(verified=verified, build_id=manifest.build_id,
                             git_hash_expected=manifest.git_hash, git_hash_running=running_hash,
                             mismatches=mismatches[:20], overlay_empty=not overlay_files,
                             overlay_files=overlay_files[:10], release_revision=release)


SPEC = ToolSpec(name="fingerprint_verify",
                description=describe(__doc__),
                input=FingerprintInput, output=FingerprintOutput, run=run, effect="read_only",
                idempotent=True, health="prove", proof_field="verified")
