"""Flash drivers: how a build's image gets onto the DUT, and what "it came back" means.
`for_profile(profile, device)` picks one by `[flash] kind` from DRIVERS, the registry of kinds.

Every driver ends the same way: SSH answers again and the target process is a new instance
(`back.target_back`); `sysupgrade` also requires a new boot (the DUT's boot_id changed).
"""

from __future__ import annotations

from typing import Any, Protocol

from labwarden.lab.config import LabProfile
from labwarden.lab.drivers.flash.base import FlashDriver, FlashFailed, boot_id
from labwarden.lab.drivers.flash.command import CommandFlash
from labwarden.lab.drivers.flash.labgrid import LabgridFlash
from labwarden.lab.drivers.flash.sysupgrade import Sysupgrade
from labwarden.lab.drivers.flash.vlab import VlabFlash
from labwarden.lab.dut.device import Device


class FlashDriverClass(Protocol):
    """A driver's class: its kind, and its constructor from the profile and the DUT."""

    @property
    def kind(self) -> str: ...

    def __call__(self, profile: LabProfile, dev: Device) -> FlashDriver: ...


DRIVERS: dict[str, FlashDriverClass] = {d.kind: d for d in (Sysupgrade, VlabFlash, CommandFlash,
                                                            LabgridFlash)}
"""`[flash] kind` -> driver (tests/test_drivers.py checks the profile schema agrees)."""
KINDS = tuple(DRIVERS)


def for_profile(profile: LabProfile, dev: Device, place: Any = None) -> FlashDriver:
    """The driver `[flash] kind` names. `place`: the session's labgrid PlaceLease, if any."""
    if profile.flash.kind == "labgrid":
        return LabgridFlash(profile, dev, place)
    return DRIVERS[profile.flash.kind](profile, dev)


__all__ = ["DRIVERS", "KINDS", "FlashDriver", "FlashFailed", "boot_id", "for_profile"]
