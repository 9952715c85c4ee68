"""`[load] kind = "none"`: a DUT with no clients (a daemon busy with its own input). Only zero
clients can be held; asking for more is a clear refusal, not a silent no-op."""

from __future__ import annotations

from typing import ClassVar

from labwarden.lab.config import NoLoadSection
from labwarden.lab.drivers.load.base import LoadError


class NoClients:
    kind: ClassVar[str] = "none"
    axis: ClassVar[str | None] = None
    default_points: ClassVar[tuple[int, ...]] = (0,)
    stops_traffic: ClassVar[bool] = False

    def __init__(self, section: NoLoadSection):
        self.section = section
        self.radios = section.radios

    async def hold(self, clients: int) -> None:
        if clients != 0:
            raise LoadError(f"this lab has no load ([load] kind = \"none\"): cannot hold "
                            f"{clients} clients", "measure with stations: 0 (or sweep densities "
                            "[0]); give the profile a [load] kind that holds clients for more")

    async def held(self, clients: int) -> bool:
        return clients == 0  # the DUT's own input is always there

    def where(self) -> str:
        return "[load] in the lab profile"
