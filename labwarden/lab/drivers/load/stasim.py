"""`[load] kind = "stasim"`: the vlab's station simulator on this host (lab/host/stasim.py)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from labwarden.lab.config import StasimLoadSection
from labwarden.lab.drivers.load.base import LoadError
from labwarden.lab.host import stasim


class Stasim:
    kind: ClassVar[str] = "stasim"
    axis: ClassVar[str | None] = "clients"
    default_points: ClassVar[tuple[int, ...]] = (18, 60, 114)
    stops_traffic: ClassVar[bool] = False

    def __init__(self, section: StasimLoadSection):
        self.section = section
        self.radios = section.radios

    async def hold(self, clients: int) -> None:
        try:
            await asyncio.to_thread(stasim.StasimLoad.of(self.section).hold, clients)
        except stasim.LoadError as exc:
            raise LoadError(exc.problem, exc.remedy) from exc

    async def held(self, clients: int) -> bool:
        return stasim.StasimLoad.of(self.section).holding() == clients

    def where(self) -> str:
        return f"the load generator log {self.section.log}"
