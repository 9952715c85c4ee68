"""Power-cycling a DUT (a fleet of one place screens a keep again after one). What power means
depends on how the DUT comes back from a flash, so `[flash] kind` picks it, reusing that
kind's flash driver:

- vlab: the DUT's own `reboot` (its rootfs/sbin/reboot, first on the vlab DUT's PATH): the vlab's
  daemon restarts every DUT process through its process manager and applies reboot drift -- a
  vlab has no kernel of its own, so that is its power; back when the target is a new instance.
- sysupgrade: the DUT's own `reboot`; back when the boot id changed and the target is new.
- labgrid: the target's Strategy moved to `[flash] state` with no image: a fresh labgrid target
  starts `unknown`, so the strategy (labgrid's ShellStrategy, the qlab's) power-cycles the board
  on its way there; back when the target is a new instance.
- command: labwarden knows only the host command that flashes, not how to power the board:
  `for_profile` raises NoPowerCycle, whose problem says so.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from labwarden.core.errors import LabError
from labwarden.lab import labgrid
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import flash as flash_drivers
from labwarden.lab.drivers.flash import back
from labwarden.lab.drivers.flash.base import FlashFailed, Report, boot_id
from labwarden.lab.drivers.flash.labgrid import LabgridFlash
from labwarden.lab.drivers.flash.sysupgrade import Sysupgrade
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError
from labwarden.lab.dut.procs import ProcInstance

REBOOT = ["reboot"]
"""The DUT's own reboot (busybox's on OpenWrt; the vlab's rootfs/sbin/reboot)."""


class NoPowerCycle(LabError):
    """This DUT's kind has no power driver: nothing was done."""

    kind = "tool"


class PowerDriver(Protocol):
    def describe(self) -> str:
        """What a cycle does, for the record."""
        ...

    async def cycle(self, before: ProcInstance | None, report: Report) -> ProcInstance:
        """Power-cycle the DUT and wait until it is back; the target's new instance."""
        ...


class Reboot:
    """The DUT's own reboot; a new boot id too when its flash driver requires one."""

    def __init__(self, profile: LabProfile, dev: Device, flasher: Sysupgrade) -> None:
        self.profile, self.dev, self.reboots = profile, dev, flasher.reboots
        self.timeout_s = profile.flash.timeout_s

    def describe(self) -> str:
        return ("the DUT's own `reboot`" + (" (a new boot)" if self.reboots else
                                            " (the vlab's process manager restarts every DUT process)"))

    async def cycle(self, before: ProcInstance | None, report: Report) -> ProcInstance:
        old_boot = await boot_id(self.dev) if self.reboots else None
        t0 = time.monotonic()
        await report("power cycle: " + self.describe())
        try:
            res = await self.dev.exec(REBOOT, timeout=30)
            if res.exit_status != 0:
                raise FlashFailed(f"`reboot` on the DUT exited {res.exit_status}",
                                  "check that the DUT has a reboot command on its PATH")
        except DeviceError:
            pass  # the DUT dropping the session while it reboots is what a reboot looks like
        left = max(1.0, self.timeout_s - (time.monotonic() - t0))
        if self.reboots:
            await back.new_boot(self.dev, old_boot, left)
        return await back.target_back(self.dev, self.profile, before, left)


class StrategyCycle:
    """labgrid: the Strategy to `[flash] state` from a fresh (unknown) target, with no image."""

    def __init__(self, flasher: LabgridFlash) -> None:
        self.flasher = flasher

    def describe(self) -> str:
        return f"labgrid {self.flasher.cfg.target}: Strategy -> {self.flasher.section.state}, no image"

    async def cycle(self, before: ProcInstance | None, report: Report) -> ProcInstance:
        f = self.flasher
        await report("power cycle: " + self.describe())
        try:
            await labgrid.transition(f.cfg, f.section.state, lease=f.place)
        except labgrid.LabgridError:
            raise
        except Exception as exc:  # labgrid's strategies raise what their drivers raise
            raise FlashFailed(f"labgrid's Strategy failed to reach {f.section.state}: "
                              + labgrid.strategy_failure(exc), "see the strategy's log, then lab_status") \
                from exc
        return await back.target_back(f.dev, f.profile, before, f.section.timeout_s)


def for_profile(profile: LabProfile, dev: Device, place: Any = None) -> PowerDriver:
    """The power driver for `[flash] kind`; NoPowerCycle where the kind has none."""
    flasher = flash_drivers.for_profile(profile, dev, place)
    if isinstance(flasher, LabgridFlash):
        return StrategyCycle(flasher)
    if isinstance(flasher, Sysupgrade):  # vlab's too
        return Reboot(profile, dev, flasher)
    raise NoPowerCycle(f"[flash] kind = \"{profile.flash.kind}\" has no power driver: labwarden "
                       "knows how to flash this DUT, not how to power it",
                       "give the place a [flash] kind that can power-cycle it (sysupgrade, vlab, "
                       "labgrid), or a second place to reproduce on")
