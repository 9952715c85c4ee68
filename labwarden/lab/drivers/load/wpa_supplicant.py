"""`[load] kind = "wpa_supplicant"`: real 802.11 stations held on the DUT itself (the qlab's
wpa_supplicant on mac80211_hwsim client radios, in a `clients` netns). The DUT's own script
(`lw-sta` in the qlab image, POSIX sh) associates stations 1..N round-robin over the enabled
VAPs, verifies each from both sides (wpa_cli status, and the AP's `iw dev IF station dump`) and
disassociates cleanly; this driver runs it over the DUT channel and reads its verdict."""

from __future__ import annotations

import re
from typing import ClassVar

from labwarden.lab.config import WpaSupplicantLoadSection
from labwarden.lab.drivers.load.base import LoadError
from labwarden.lab.dut.device import Device

_HELD = re.compile(r"^associated (\d+)\b", re.M)
_RELEASED = re.compile(r"^released (\d+)$", re.M)


class WpaSupplicant:
    kind: ClassVar[str] = "wpa_supplicant"
    axis: ClassVar[str | None] = "clients"
    default_points: ClassVar[tuple[int, ...]] = (18, 60, 114)
    stops_traffic: ClassVar[bool] = False

    def __init__(self, section: WpaSupplicantLoadSection, device: Device | None = None):
        self.section = section
        self.radios = section.radios
        self.device = device

    async def hold(self, clients: int) -> None:
        if self.device is None:
            raise LoadError("the wpa_supplicant load runs on the DUT, and no DUT was given",
                            "build it with load.for_profile(profile, device)")
        timeout = self.section.timeout_s
        verb = ["assoc", str(clients)] if clients else ["release"]
        argv = [*self.section.command, *verb, str(int(timeout))]
        res = await self.device.exec(argv, timeout=timeout + 30)
        found = (_HELD if clients else _RELEASED).findall(res.stdout)
        if res.exit_status != 0 or not found or (clients and int(found[-1]) != clients):
            tail = " | ".join((res.stderr.strip() or res.stdout.strip()).splitlines()[-4:])[-400:]
            raise LoadError(f"`{' '.join(argv)}` on the DUT exited {res.exit_status}: {tail}",
                            f"see {self.where()}; `wifi status` shows the APs")

    async def held(self, clients: int) -> None:
        return None  # the stations live on the DUT: its own count ([readers] clients) tells

    def where(self) -> str:
        return f"`{' '.join(self.section.command)} status` on the DUT"
