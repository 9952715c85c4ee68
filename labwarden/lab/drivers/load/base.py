"""What every load driver is: the LoadDriver protocol and LoadError."""

from __future__ import annotations

from typing import ClassVar, Protocol

from labwarden.core.errors import LabError


class LoadError(LabError):
    """The load cannot hold the clients asked for."""

    kind = "device"


class LoadDriver(Protocol):
    """Holds the DUT's workload (labgrid's Protocol habit: the role, not a vendor). The driver is
    the only place that knows what the workload is: how many points it has (`points`), how to
    hold one (`hold`), whether it is held (`held`), and what to call it (`label`)."""

    kind: ClassVar[str]
    axis: ClassVar[str | None]
    """What a workload point counts ("clients", "streams"); None when the load has no axis (the
    DUT works on its own input: one point, 0, and no client-count evidence)."""
    default_points: ClassVar[tuple[int, ...]]
    """The workload points an experiment screens and sweeps at when `[decision] densities` is
    not declared (the last is the densest: the screening point)."""
    stops_traffic: ClassVar[bool]
    """True when the load is traffic that `hold(0)` stops while the DUT keeps its clients and
    config: `sweep` then measures a real idle baseline at each point (a window with the load
    stopped). False for station loads, whose every window is already idle of traffic."""
    radios: int
    """Radios (or ports) the clients are split over: the even-split check uses it."""

    async def hold(self, clients: int) -> None:
        """Replace whatever load runs by `clients` clients (0 = none); raise LoadError if not."""
        ...

    async def held(self, clients: int) -> bool | None:
        """Whether the load side holds `clients` now: True / False when it can tell, None when
        only the DUT's own count (`[readers] clients`) can."""
        ...

    def where(self) -> str:
        """Where to look when holding failed (a log, a script), for error remedies."""
        ...


def label(driver: LoadDriver, point: int) -> str:
    """A workload point in words: "114 clients", "4 streams", or "its own workload"."""
    if driver.axis is None:
        return "its own workload (no load axis)"
    return f"{point} {driver.axis}"
