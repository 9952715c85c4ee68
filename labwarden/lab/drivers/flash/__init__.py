"""Flash drivers: how a build's image gets onto the DUT, and what "it came back" means.
`for_profile(profile, device)` picks one by `[flash] kind`.

Every driver ends the same way: SSH answers again and the target process is a new instance
(`procs.wait_new_instance`); `sysupgrade` also requires a new boot (the DUT's boot_id changed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from labwarden.core.errors import LabError
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.procs import ProcInstance

Report = Callable[[str], Awaitable[None]]
BOOT_ID = "/proc/sys/kernel/random/boot_id"


class FlashFailed(LabError):
    """The flash command failed, or the DUT did not come back as the driver requires."""

    kind = "device"


class FlashDriver(Protocol):
    kind: ClassVar[str]

    def describe(self) -> str:
        """What it runs, for progress and errors."""
        ...

    async def install(self, image: Path, before: ProcInstance | None, report: Report) -> ProcInstance:
        """Install `image` and wait until the DUT is back; returns the target's new instance."""
        ...


async def boot_id(dev: Device) -> str | None:
    """The DUT's boot id (changes on every kernel boot); None where it cannot be read."""
    res = await dev.run(["cat", BOOT_ID], timeout=10)
    return res.stdout.strip() or None if res.exit_status == 0 else None


def for_profile(profile: LabProfile, dev: Device, place: Any = None) -> FlashDriver:
    """The driver `[flash] kind` names. `place`: the session's labgrid PlaceLease, if any."""
    from labwarden.lab.drivers.flash import command, labgrid, sysupgrade, vlab

    sec = profile.flash
    if sec.kind == "labgrid":
        return labgrid.LabgridFlash(profile, dev, place)
    drivers: dict[str, type] = {"sysupgrade": sysupgrade.Sysupgrade, "vlab": vlab.VlabFlash,
                                "command": command.CommandFlash}
    return drivers[sec.kind](profile, dev)  # type: ignore[no-any-return]


KINDS = ("sysupgrade", "vlab", "command", "labgrid")
