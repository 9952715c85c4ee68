"""Power-cycle the session's DUT and prove what runs again (a helper of `experiment`'s one-place
reproduction, not a tool): the power driver `[flash] kind` picks (lab/drivers/power.py), then
`fingerprint_verify` of the build that ran before, as a nested call -- a power cycle withdraws
the verification until it passes; what the cycle drifted (a vlab's reboot drift) the guard heals
at the next switch to a build (abtest.switch_to). The cycle is a `power-cycle` note in the
transcript, naming the place."""

from __future__ import annotations

import json
import time

from labwarden.core.errors import LabError, ToolError
from labwarden.core.events import Note
from labwarden.core.experiments import PowerCycle
from labwarden.lab.drivers import power
from labwarden.lab.dut import procs
from labwarden.results.fingerprint import FingerprintOutput
from labwarden.tools.context import LabContext

AUTHOR = "power-cycle"


async def power_cycle(ctx: LabContext) -> PowerCycle:
    """Power-cycle the DUT and verify its build again. `done=False` (nothing was done) where the
    kind has no power driver; LabError when the DUT did not come back or does not verify (the
    board is then `unknown`, as after a flash that did not come back)."""
    prof, dev = ctx.profile, ctx.device
    try:
        driver = power.for_profile(prof, dev, ctx.place)
    except power.NoPowerCycle as exc:
        return PowerCycle(done=False, how=exc.problem)
    state = ctx.state
    running = state.flashed_build if state.fingerprint_ok() else None
    before = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    state.verified_build, state.verified_at = None, None  # until it verifies again
    ctx.save_state(state)
    t0 = time.monotonic()

    async def report(message: str) -> None:
        await ctx.report(5, 6, message)

    try:
        await driver.cycle(before, report)
    except LabError as exc:
        state.board_health = "unknown"
        state.health_reason = f"power cycle ({driver.describe()}) did not come back: {exc.problem}"[:400]
        ctx.save_state(state)
        raise
    cycle = PowerCycle(done=True, how=driver.describe(), seconds=round(time.monotonic() - t0, 2))
    ctx.log(Note(author=AUTHOR, text=json.dumps({"place": ctx.place_name, "how": cycle.how,
                                                 "seconds": cycle.seconds})))
    if running is not None:
        out = await ctx.call("fingerprint_verify", {"build_id": running}, FingerprintOutput)
        if not out.verified:
            raise ToolError("device", f"after the power cycle, build {running} did not verify: "
                            + "; ".join(f"{m.check} {m.path}" for m in out.mismatches[:3]),
                            "lab_status; flash a known image and fingerprint_verify it")
        cycle.verified = running
    return cycle
