"""fingerprint_verify: prove what runs on the DUT is the build, by binary fingerprint.

Read-only. The proof is the binaries themselves, read on the DUT: the sha256 and ELF build-id of
every deployed artifact, the build-id of the image the target process runs (/proc/PID/exe: what
runs, even if the file was replaced since), that the process maps the deployed files (not an
overlay copy), and that the overlay is empty. Where the profile says the target prints its git
hash (`[target] prints_git_hash`), that is checked too (full, or an abbreviation of 7+ hex).
A check that fails, or cannot be completed, withdraws every earlier
"verified" for this DUT. Never trusts DISTRIB_REVISION or package metadata: they lie when an image is
patched but not bumped (the revision is reported, marked as not used).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from pydantic import Field

from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.dut import procs
from labwarden.lab.elfsym import build_id_from_head
from labwarden.lab.host.builder import BuildManifest
from labwarden.lab.host.builds import load_manifest
from labwarden.results.fingerprint import FingerprintOutput, Mismatch
from labwarden.tools.context import LabContext

_HASH = re.compile(r"\b([0-9a-f]{7,40}|unknown)\b")


class FingerprintInput(ToolInput):
    build_id: str = Field(description="the build that should be running", examples=["0649198d591e4e52"])


def _revoke(ctx: LabContext) -> None:
    """A failed or unfinished check proves nothing runs as verified: every earlier "verified"
    for this DUT is withdrawn (lab_status, the guard and the conditions then say unverified)."""
    state = ctx.state
    if state.verified_build is not None:
        state.verified_build = None
        state.verified_at = None
        ctx.save_state(state)


async def run(ctx: LabContext, inp: FingerprintInput) -> FingerprintOutput:
    manifest = load_manifest(ctx.profile, inp.build_id)
    t0 = time.monotonic()
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
        if state.flash_s is not None:  # right after a flash: one switch of image, measured
            state.switch_s = round(state.flash_s + time.monotonic() - t0, 2)
            state.flash_s = None
        ctx.save_state(state)
    else:
        _revoke(ctx)
    return out


def hash_matches(printed: str | None, built: str) -> bool:
    """The hash a binary prints names the commit built: the full hash, or an abbreviation of at
    least 7 hex digits (a Makefile's `git rev-parse --short` default) that starts it."""
    return printed is not None and len(printed) >= 7 and built.startswith(printed)


async def _check(ctx: LabContext, manifest: BuildManifest) -> FingerprintOutput:
    prof, dev = ctx.profile, ctx.device
    mismatches: list[Mismatch] = []
    proven: list[str] = []

    proc = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    running_hash = None
    if proc is None:
        mismatches.append(Mismatch(path=prof.target.process, check="process",
                                   expected="running", actual="not running"))
    else:
        exe_path = f"/proc/{proc.pid}/exe"
        if prof.target.prints_git_hash:
            ver = await dev.run([exe_path, "--version"], timeout=10)
            m = _HASH.search(ver.stdout)
            running_hash = m.group(1) if m else ver.stdout.strip()[:80] or None
            if not hash_matches(running_hash, manifest.git_hash):
                mismatches.append(Mismatch(path=exe_path, check="git_hash",
                                           expected=manifest.git_hash, actual=str(running_hash)))
            proven.append("the git hash the running target prints")
        maps = (await dev.read_file(f"/proc/{proc.pid}/maps")).decode(errors="replace")
        mapped = {ln.split(None, 5)[5] for ln in maps.splitlines() if len(ln.split(None, 5)) == 6}
        exe = (await dev.run(["readlink", exe_path])).stdout.strip()
        for art in manifest.artifacts:
            base = art.path.rsplit("/", 1)[-1]
            if art.name == prof.target.process:
                if exe != art.path:
                    mismatches.append(Mismatch(path=art.path, check="mapped", expected=art.path,
                                               actual=exe or "?"))
                if art.build_id:  # the image the process runs, even if the file was replaced
                    running = build_id_from_head(await dev.read_head(exe_path))
                    if running != art.build_id:
                        mismatches.append(Mismatch(path=exe_path, check="build_id",
                                                   expected=art.build_id, actual=running or "none"))
                    proven.append("the ELF build-id of the running target (/proc/PID/exe)")
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
        elif art.build_id:
            bid = build_id_from_head(await dev.read_head(art.path))
            if bid != art.build_id:
                mismatches.append(Mismatch(path=art.path, check="build_id", expected=art.build_id,
                                           actual=bid or "none"))
    with_bid = sum(1 for a in manifest.artifacts if a.build_id)
    proven.append(f"sha256 of {len(manifest.artifacts)} artifact(s) and the ELF build-id of "
                  f"{with_bid}, read on the DUT")
    if not prof.target.prints_git_hash:
        proven.append("git hash not checked ([target] prints_git_hash is off)")

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
                             overlay_files=overlay_files[:10], release_revision=release,
                             proven_by=proven)


SPEC = ToolSpec(name="fingerprint_verify",
                description=describe(__doc__),
                input=FingerprintInput, output=FingerprintOutput, run=run, effect="read_only",
                idempotent=True, health="prove", proof_field="verified")
