"""`[flash] kind = "sysupgrade"`: upload the image to the DUT's tmp, run the DUT's own flash
command on it (OpenWrt's `sysupgrade -n`), and wait for a new boot -- boot_id changes, SSH
answers again, the target is a new instance."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

from labwarden.core.devtext import quote
from labwarden.lab.config import LabProfile, SysupgradeFlashSection
from labwarden.lab.drivers.flash import back
from labwarden.lab.drivers.flash.base import FlashFailed, Report, boot_id
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError
from labwarden.lab.dut.procs import ProcInstance


class Sysupgrade:
    kind: ClassVar[str] = "sysupgrade"
    reboots: ClassVar[bool] = True
    """A new boot (boot_id) is part of coming back."""

    def __init__(self, profile: LabProfile, dev: Device):
        assert isinstance(profile.flash, SysupgradeFlashSection)
        self.profile, self.dev, self.section = profile, dev, profile.flash

    def describe(self) -> str:
        return " ".join(self.section.command)

    async def install(self, image: Path, before: ProcInstance | None, report: Report) -> ProcInstance:
        dev, timeout = self.dev, self.section.timeout_s
        remote = f"{self.profile.dut.paths.tmp.rstrip('/')}/labwarden-{image.parent.name}.img"
        await report(f"uploading image {image.name}")
        await dev.put(image, remote)
        old_boot = await boot_id(dev) if self.reboots else None
        t0 = time.monotonic()
        await report("running " + self.describe())
        try:
            res = await dev.exec([*self.section.command, remote], timeout=timeout)
            if res.exit_status != 0:
                raise FlashFailed(f"{self.describe()} exited {res.exit_status}: "
                                  f"{quote(res.stderr)}",
                                  "the board is now `unknown`: run lab_status, then flash a known image")
        except DeviceError:
            pass  # the DUT dropping the session while it reboots is what a flash looks like
        await report("waiting for the DUT to come back")
        left = max(1.0, timeout - (time.monotonic() - t0))
        if self.reboots:
            await back.new_boot(dev, old_boot, left)
        inst = await back.target_back(dev, self.profile, before, left)
        await dev.run(["rm", "-f", remote])  # a real DUT's /tmp is RAM: do not leave it filling up
        return inst
