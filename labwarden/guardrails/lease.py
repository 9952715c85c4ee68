"""The lease: one mutating session per DUT at a time, with expiry and renewal.

Held on the DUT itself (`mkdir` is atomic on any POSIX filesystem), so two servers on two hosts
see the same lock; with the labgrid backend the place is acquired too (open_lab). The holder and
the expiry are written inside, so a refusal can name them.
"""

from __future__ import annotations

import time

from pydantic import BaseModel

from labwarden.core.devtext import quote
from labwarden.lab.dut.device import Device

TTL_S = 300.0


class LeaseInfo(BaseModel):
    holder: str
    expires: float  # unix time

    def describe(self) -> str:
        """The holder as read from the DUT (device text: quoted) and the expiry."""
        left = self.expires - time.time()
        who = quote(self.holder, 160)
        return f"{who} (expires in {left:.0f} s)" if left > 0 else f"{who} (expired)"


class Lease:
    def __init__(self, dev: Device, run_dir: str, holder: str, ttl_s: float = TTL_S):
        self.dev = dev
        self.dir = f"{run_dir.rstrip('/')}/labwarden.lease"
        self.holder = holder
        self.ttl_s = ttl_s
        self.held = False

    async def current(self) -> LeaseInfo | None:
        res = await self.dev.run(["cat", f"{self.dir}/owner"])
        if res.exit_status != 0:
            return None
        try:
            holder, expires = res.stdout.strip().rsplit(" ", 1)
            return LeaseInfo(holder=holder, expires=float(expires))
        except ValueError:
            return LeaseInfo(holder="(unreadable lease)", expires=0.0)

    async def _write(self) -> None:
        await self.dev.run(["sh", "-c", 'printf "%s %s\\n" "$1" "$2" > "$3/owner"', "lw-lease",
                            self.holder, f"{time.time() + self.ttl_s:.0f}", self.dir])

    async def acquire(self) -> LeaseInfo | None:
        """None when acquired (or renewed); else the other holder's lease."""
        if (await self.dev.run(["mkdir", self.dir])).exit_status == 0:
            await self._write()
            self.held = True
            return None
        cur = await self.current()
        if cur is not None and cur.holder == self.holder:
            await self._write()  # renewal
            self.held = True
            return None
        if cur is not None and cur.expires > time.time():
            return cur
        # expired (or half-written by a crashed holder): take it over; mkdir decides a race
        await self.dev.run(["rm", "-rf", self.dir])
        if (await self.dev.run(["mkdir", self.dir])).exit_status == 0:
            await self._write()
            self.held = True
            return None
        return await self.current()

    async def release(self) -> None:
        cur = await self.current()
        if cur is not None and cur.holder == self.holder:
            await self.dev.run(["rm", "-rf", self.dir])
        self.held = False
