"""`[load] kind = "command"`: the user's own script on the load host. `hold` with `{n}` filled in
must exit 0 once n clients are held (0 = none); its output tail is the error when it does not."""

from __future__ import annotations

import asyncio
import contextlib
from typing import ClassVar

from labwarden.lab.config import CommandLoadSection
from labwarden.lab.drivers.load.base import LoadError


class CommandLoad:
    kind: ClassVar[str] = "command"
    axis: ClassVar[str | None] = "clients"
    default_points: ClassVar[tuple[int, ...]] = (18, 60, 114)
    stops_traffic: ClassVar[bool] = False

    def __init__(self, section: CommandLoadSection):
        self.section = section
        self.radios = section.radios

    async def hold(self, clients: int) -> None:
        argv = [a.replace("{n}", str(clients)) for a in self.section.hold]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise LoadError(f"cannot start the load command {argv[0]}: {exc}",
                            "check [load] hold in the lab profile") from exc
        try:
            async with asyncio.timeout(self.section.timeout_s):
                out, _ = await proc.communicate()
        except BaseException as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            if isinstance(exc, TimeoutError):
                raise LoadError(f"the load command `{' '.join(argv)}` did not finish within "
                                f"{self.section.timeout_s:g} s", "raise [load] timeout_s, or make "
                                "the script return once the clients are held") from exc
            raise
        if proc.returncode != 0:
            tail = out.decode(errors="replace").strip()[-300:]
            raise LoadError(f"the load command `{' '.join(argv)}` exited {proc.returncode}: {tail}",
                            "run it by hand to see why; check [load] hold in the lab profile")

    async def held(self, clients: int) -> None:
        return None  # a script holds and exits: only the DUT's count (or holding again) tells

    def where(self) -> str:
        return f"the load command {self.section.hold[0]}"
