"""Load drivers: who holds the DUT's clients. `for_profile(profile)` picks one by `[load] kind`
from DRIVERS, the registry of kinds (a new kind -- wpa_supplicant stations, iperf3 traffic -- is
a module here, a model in config.LoadSection's union and an entry below).

A driver holds a number of clients (replacing what it held before; 0 = none) on the load host;
whether the DUT sees them is for the DUT's own count (`[readers] clients`) to say.
"""

from __future__ import annotations

from labwarden.lab.config import LabProfile
from labwarden.lab.drivers.load.base import LoadDriver, LoadError
from labwarden.lab.drivers.load.command import CommandLoad
from labwarden.lab.drivers.load.iperf3 import Iperf3
from labwarden.lab.drivers.load.none import NoClients
from labwarden.lab.drivers.load.stasim import Stasim
from labwarden.lab.drivers.load.wpa_supplicant import WpaSupplicant
from labwarden.lab.dut.device import Device

DRIVERS: dict[str, type[LoadDriver]] = {d.kind: d for d in (Stasim, NoClients, CommandLoad,
                                                                 WpaSupplicant, Iperf3)}
"""`[load] kind` -> driver (tests/test_drivers.py checks the profile schema agrees)."""
KINDS = tuple(DRIVERS)


def for_profile(profile: LabProfile, device: Device | None = None) -> LoadDriver:
    """The driver `[load] kind` names, bound to the profile's section (and, for a load held on
    the DUT itself -- wpa_supplicant stations -- to the DUT)."""
    if profile.load.kind == "wpa_supplicant":
        return WpaSupplicant(profile.load, device)  # type: ignore[arg-type]
    return DRIVERS[profile.load.kind](profile.load)  # type: ignore[call-arg]


__all__ = ["DRIVERS", "KINDS", "LoadDriver", "LoadError", "for_profile"]
