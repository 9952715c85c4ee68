"""What every load driver is: the LoadDriver protocol and LoadError."""

from __future__ import annotations

from typing import ClassVar, Protocol

from labwarden.core.errors import LabError


class LoadError(LabError):
    """The load cannot hold the clients asked for."""

    kind = "device"


class LoadDriver(Protocol):
    """Holds clients on the DUT (labgrid's Protocol habit: the role, not a vendor)."""

    kind: ClassVar[str]
    stops_traffic: ClassVar[bool]
    """True when the load is traffic that `hold(0)` stops while the DUT keeps its clients and
    config: `sweep` then measures a real idle baseline at each point (a window with the load
    stopped). False for station loads, whose every window is already idle of traffic."""
    radios: int
    """Radios (or ports) the clients are split over: the even-split check uses it."""

    async def hold(self, clients: int) -> None:
        """Replace whatever load runs by `clients` clients (0 = none); raise LoadError if not."""
        ...

    def where(self) -> str:
        """Where to look when holding failed (a log, a script), for error remedies."""
        ...
