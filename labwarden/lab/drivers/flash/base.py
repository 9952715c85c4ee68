"""What every flash driver is: the FlashDriver protocol, FlashFailed, and the DUT's boot id."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import ClassVar, Protocol

from labwarden.core.errors import LabError
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
