"""Load drivers: who holds the DUT's clients. `for_profile(profile)` picks one by `[load] kind`.

A driver holds a number of clients (replacing what it held before; 0 = none) on the load host;
whether the DUT sees them is for the DUT's own count (`[readers] clients`) to say.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from labwarden.core.errors import LabError
from labwarden.lab.config import LabProfile


class LoadError(LabError):
    """The load cannot hold the clients asked for."""

    kind = "device"


class LoadDriver(Protocol):
    """Holds clients on the DUT (labgrid's Protocol habit: the role, not a vendor)."""

    kind: ClassVar[str]
    radios: int
    """Radios (or ports) the clients are split over: the even-split check uses it."""

    async def hold(self, clients: int) -> None:
        """Replace whatever load runs by `clients` clients (0 = none); raise LoadError if not."""
        ...

    def where(self) -> str:
        """Where to look when holding failed (a log, a script), for error remedies."""
        ...


def for_profile(profile: LabProfile) -> LoadDriver:
    """The driver `[load] kind` names, bound to the profile's section."""
    from labwarden.lab.drivers.load import command, none, stasim

    drivers: dict[str, type] = {"stasim": stasim.Stasim, "none": none.NoClients,
                                "command": command.CommandLoad}
    return drivers[profile.load.kind](profile.load)  # type: ignore[no-any-return]


KINDS = ("stasim", "none", "command")
"""Every kind a driver exists for (tests/test_drivers.py checks the profile schema agrees)."""
