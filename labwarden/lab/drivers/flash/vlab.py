"""`[flash] kind = "vlab"`: the vlab's own sysupgrade. As `sysupgrade`, except that its reboot
restarts the DUT's processes, not a kernel: the boot id stays, so only a new target instance
says it came back."""

from __future__ import annotations

from typing import ClassVar

from labwarden.lab.drivers.flash.sysupgrade import Sysupgrade


class VlabFlash(Sysupgrade):
    kind: ClassVar[str] = "vlab"
    reboots: ClassVar[bool] = False
