"""flash: install a built image on the DUT and wait for it to come back.

Destructive: replaces what runs and wipes the overlay. Uploads the image by SFTP (sha256
checked), runs the profile's flash command (sysupgrade) and waits until the DUT answers. A flash
that fails or does not come back leaves the board `unknown`; a good one marks the new build as
flashed and not yet verified.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.core.devtext import quote
from labwarden.core.errors import ToolError
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.dut import procs
from labwarden.lab.dut.errors import DeviceError
from labwarden.tools.build import load_manifest
from labwarden.tools.context import LabContext


class FlashInput(ToolInput):
    build_id: str = Field(description="a build id returned by `build`", examples=["0649198d591e4e52"])


class FlashOutput(BaseModel):
    flashed: bool
    build_id: str
    overlay_wiped: bool = Field(description="the DUT's overlay holds no file after the flash")
    duration_s: float


async def run(ctx: LabContext, inp: FlashInput) -> FlashOutput:
    manifest = load_manifest(ctx, inp.build_id)
    prof = ctx.profile
    dev = ctx.device
    t0 = time.monotonic()
    remote = f"{prof.dut.paths.tmp.rstrip('/')}/labwarden-{manifest.build_id}.img"
    await ctx.report(1, 4, f"uploading image {Path(manifest.image).name}")
    await dev.put(Path(manifest.image), remote)
    state = ctx.state
    was_good = state.board_health == "good"
    state.board_health = "unknown"  # from here until the DUT is back, we do not know
    state.health_reason = f"flash of {manifest.build_id} in progress"
    ctx.save_state(state)
    before = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    await ctx.report(2, 4, "running " + " ".join(prof.flash.command))
    try:
        res = await dev.exec([*prof.flash.command, remote], timeout=prof.flash.timeout_s)
        if res.exit_status != 0:
            state.health_reason = f"flash command exited {res.exit_status}: {quote(res.stderr)}"
            ctx.save_state(state)
            raise ToolError("device", f"flash failed: {quote(res.stderr)}",
                            "the board is now `unknown`: run lab_status, then flash a known image")
    except DeviceError:
        pass  # the DUT dropping the session while it reboots is what a flash looks like
    await ctx.report(3, 4, "waiting for the DUT to come back")
    try:
        await procs.wait_new_instance(dev, prof.target.process, before, prof.flash.timeout_s,
                                         prof.target.pidfile(prof.target.process))
    except DeviceError as exc:
        state.health_reason = f"no answer after flash: {exc}"
        ctx.save_state(state)
        raise ToolError("device", f"the DUT did not come back after flashing {manifest.build_id}",
                        "the board is now `unknown`: check its console/power, then lab_status") \
            from exc
    await dev.run(["rm", "-f", remote])  # a real DUT's /tmp is RAM: do not leave it filling up
    left = await dev.run(["find", prof.dut.paths.overlay, "-mindepth", "1", "-type", "f"])
    overlay_wiped = left.exit_status == 0 and not left.stdout.strip()
    if state.health_reason == f"flash of {manifest.build_id} in progress":
        # a flash that succeeds is not yet a health check: that needs fingerprint_verify
        state.board_health = "good" if was_good else "unknown"
        state.health_reason = None if was_good else f"flashed {manifest.build_id}: verify it"
    state.record_flash(manifest.build_id)
    ctx.save_state(state)
    await ctx.report(4, 4, "flashed")
    return FlashOutput(flashed=True, build_id=manifest.build_id, overlay_wiped=overlay_wiped,
                       duration_s=round(time.monotonic() - t0, 2))


SPEC = ToolSpec(name="flash", description=describe(__doc__),
                input=FlashInput, output=FlashOutput, run=run, effect="destructive",
                requires=frozenset({"lease", "board_healthy"}), budget_class="flash",
                health="restore", image_arg="build_id", counts_as_flash=True)
