"""Load drivers: who holds the DUT's clients. `for_profile(profile)` picks one by `[load] kind`
from DRIVERS, the registry of kinds (a new kind -- wpa_supplicant stations, iperf3 traffic -- is
a module here, a model in config.LoadSection's union and an entry below).

A driver holds a workload point (a number of clients or streams, replacing what it held before;
0 = none) and says whether it holds one; where the DUT has its own count (`[readers] clients`),
`is_held` asks it too. `points` are the workload points an experiment screens and sweeps at: the
profile's `[decision] densities`, else the driver's own (a load without an axis has one: 0).
"""

from __future__ import annotations

from labwarden.lab.config import LabProfile
from labwarden.lab.drivers.load.base import LoadDriver, LoadError, label
from labwarden.lab.drivers.load.command import CommandLoad
from labwarden.lab.drivers.load.iperf3 import Iperf3
from labwarden.lab.drivers.load.none import NoClients
from labwarden.lab.drivers.load.stasim import Stasim
from labwarden.lab.drivers.load.wpa_supplicant import WpaSupplicant
from labwarden.lab.dut import datamodel
from labwarden.lab.dut.device import Device

DRIVERS: dict[str, type[LoadDriver]] = {d.kind: d for d in (Stasim, NoClients, CommandLoad,
                                                                 WpaSupplicant, Iperf3)}
"""`[load] kind` -> driver (tests/test_drivers.py checks the profile schema agrees)."""
KINDS = tuple(DRIVERS)


def for_profile(profile: LabProfile, device: Device | None = None) -> LoadDriver:
    """The driver `[load] kind` names, bound to the profile's section (and, for a load held on
    the DUT itself -- wpa_supplicant stations -- to the DUT)."""
    if profile.load.kind == "wpa_supplicant":
        return WpaSupplicant(profile.load, device)
    # each kind's driver takes that kind's section model: a dict's type cannot pair them
    return DRIVERS[profile.load.kind](profile.load)  # type: ignore[call-arg]


def points(profile: LabProfile) -> list[int]:
    """The workload points of an experiment: `[decision] densities` when declared, else the load
    driver's own (the last is the densest: where screening runs)."""
    declared = profile.decision.densities
    return list(declared) if declared else list(DRIVERS[profile.load.kind].default_points)


async def is_held(driver: LoadDriver, device: Device, profile: LabProfile, point: int) -> bool:
    """Whether `point` is held now, as far as the lab can tell: the driver's own answer, and the
    DUT's count where it has a reader. Neither able to tell -> False (hold it again: holding is
    idempotent, a wrong "held" would measure the wrong workload)."""
    side = await driver.held(point)
    if side is False:
        return False
    counted = await datamodel.total(device, profile) if driver.axis is not None else None
    if counted is not None:
        return counted == point
    return side is True


__all__ = ["DRIVERS", "KINDS", "LoadDriver", "LoadError", "for_profile", "is_held", "label",
           "points"]
