"""flash: install a built image on the DUT and wait for it to come back.

Destructive: replaces what runs and wipes the overlay. The profile's `[flash] kind` says how:
sysupgrade (upload by SFTP, sha256 checked; the DUT's own command; wait for a new boot), vlab,
a host-side command, or a labgrid Strategy; each waits until the target runs as a new instance.
A flash that fails or does not come back leaves the board `unknown`; a good one marks the new
build as flashed and not yet verified.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import Field

from labwarden.core.errors import ToolError
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.drivers import flash as flash_drivers
from labwarden.lab.drivers.flash import FlashFailed
from labwarden.lab.dut import procs
from labwarden.lab.dut.errors import DeviceError
from labwarden.lab.host.builds import load_manifest
from labwarden.results.flash import FlashOutput
from labwarden.tools.context import LabContext


class FlashInput(ToolInput):
    build_id: str = Field(description="a build id returned by `build`", examples=["0649198d591e4e52"])


async def run(ctx: LabContext, inp: FlashInput) -> FlashOutput:
    manifest = load_manifest(ctx.profile, inp.build_id)
    prof = ctx.profile
    dev = ctx.device
    t0 = time.monotonic()
    driver = flash_drivers.for_profile(prof, dev, ctx.place)
    state = ctx.state
    was_good = state.board_health == "good"
    state.board_health = "unknown"  # from here until the DUT is back, we do not know
    state.health_reason = f"flash of {manifest.build_id} in progress"
    ctx.save_state(state)
    before = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    steps = 0

    async def report(message: str) -> None:
        nonlocal steps
        steps += 1
        await ctx.report(steps, 4, message)

    try:
        await driver.install(Path(manifest.image), before, report)
    except (FlashFailed, DeviceError) as exc:
        state.health_reason = f"flash of {manifest.build_id} failed: {exc.problem}"[:400]
        ctx.save_state(state)
        raise ToolError("device", f"flash of {manifest.build_id} ({driver.describe()}) failed: "
                        f"{exc.problem}", "the board is now `unknown`: check its console/power, "
                        "then lab_status and flash a known image") from exc
    left = await dev.run(["find", prof.dut.paths.overlay, "-mindepth", "1", "-type", "f"])
    overlay_wiped = left.exit_status == 0 and not left.stdout.strip()
    if state.health_reason == f"flash of {manifest.build_id} in progress":
        # a flash that succeeds is not yet a health check: that needs fingerprint_verify
        state.board_health = "good" if was_good else "unknown"
        state.health_reason = None if was_good else f"flashed {manifest.build_id}: verify it"
    state.record_flash(manifest.build_id)
    state.flash_s = round(time.monotonic() - t0, 2)  # fingerprint_verify adds its own: switch_s
    ctx.save_state(state)
    await ctx.report(4, 4, "flashed")
    return FlashOutput(flashed=True, build_id=manifest.build_id, overlay_wiped=overlay_wiped,
                       duration_s=round(time.monotonic() - t0, 2))


SPEC = ToolSpec(name="flash", description=describe(__doc__),
                input=FlashInput, output=FlashOutput, run=run, effect="destructive",
                requires=frozenset({"lease", "board_healthy"}), budget_class="flash",
                health="restore", image_arg="build_id", counts_as_flash=True)
