"""Waiting for a flashed DUT to come back: SSH answers, (optionally) a new boot, and the target
process is a new instance."""

from __future__ import annotations

import asyncio
import time

from labwarden.lab.config import LabProfile
from labwarden.lab.drivers.flash.base import FlashFailed, boot_id
from labwarden.lab.dut import procs
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError
from labwarden.lab.dut.procs import ProcInstance


async def new_boot(dev: Device, old: str | None, timeout: float) -> str:
    """Wait until the DUT answers with a boot id other than `old`."""
    deadline = time.monotonic() + timeout
    now: str | None = None
    while time.monotonic() < deadline:
        try:
            await dev.wait_reachable(max(0.5, deadline - time.monotonic()))
            now = await boot_id(dev)
            if now is not None and now != old:
                return now
        except DeviceError:
            pass
        await asyncio.sleep(0.5)
    raise FlashFailed(f"the DUT did not boot again within {timeout:g} s (boot_id still {now})",
                      "did the flash command reboot it? check its console; raise [flash] "
                      "timeout_s if it is only slow", kind="timeout")


async def target_back(dev: Device, profile: LabProfile, before: ProcInstance | None,
                      timeout: float) -> ProcInstance:
    """Wait until the target runs as a new instance (not `before`)."""
    name = profile.target.process
    try:
        return await procs.wait_new_instance(dev, name, before, timeout, profile.target.pidfile(name))
    except DeviceError as exc:
        raise FlashFailed(f"the DUT did not come back: {exc.problem}",
                          "check its console/power, then lab_status", kind="timeout") from exc
