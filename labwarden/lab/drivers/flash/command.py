"""`[flash] kind = "command"`: a flasher that runs on this host (TFTP, a serial loader, a vendor
tool), with `{image}` `{host}` `{port}` `{user}` filled in; then wait until SSH answers and the
target is a new instance."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import ClassVar

from labwarden.lab.config import CommandFlashSection, LabProfile
from labwarden.lab.drivers.flash import back
from labwarden.lab.drivers.flash.base import FlashFailed, Report
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.procs import ProcInstance


class CommandFlash:
    kind: ClassVar[str] = "command"

    def __init__(self, profile: LabProfile, dev: Device):
        assert isinstance(profile.flash, CommandFlashSection)
        self.profile, self.dev, self.section = profile, dev, profile.flash

    def describe(self) -> str:
        return " ".join(self.section.command)

    def argv(self, image: Path) -> list[str]:
        ep = self.dev.endpoint
        fill = {"{image}": str(image), "{host}": ep.host, "{port}": str(ep.port), "{user}": ep.user}
        out = []
        for arg in self.section.command:
            for key, value in fill.items():
                arg = arg.replace(key, value)
            out.append(arg)
        return out

    async def install(self, image: Path, before: ProcInstance | None, report: Report) -> ProcInstance:
        argv = self.argv(image)
        await report("running " + " ".join(argv))
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise FlashFailed(f"cannot start the flash command {argv[0]}: {exc}",
                              "check [flash] command in the lab profile") from exc
        try:
            async with asyncio.timeout(self.section.timeout_s):
                out, _ = await proc.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        if proc.returncode != 0:
            raise FlashFailed(f"`{' '.join(argv)}` exited {proc.returncode}: "
                              f"{out.decode(errors='replace').strip()[-300:]}",
                              "the board is now `unknown`: run lab_status, then flash a known image")
        await report("waiting for the DUT to come back")
        return await back.target_back(self.dev, self.profile, before, self.section.timeout_s)
