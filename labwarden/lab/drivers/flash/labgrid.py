"""`[flash] kind = "labgrid"`: the DUT's labgrid Strategy moves to `state`, with the build's image
given to the env as `images.<image_key>` (what its flasher installs); then wait until the
target is a new instance. The place is the session's (a RemotePlace is held for the session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from labwarden.lab import labgrid
from labwarden.lab.config import LabgridFlashSection, LabProfile
from labwarden.lab.drivers.flash import back
from labwarden.lab.drivers.flash.base import FlashFailed, Report
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.procs import ProcInstance


class LabgridFlash:
    kind: ClassVar[str] = "labgrid"

    def __init__(self, profile: LabProfile, dev: Device, place: Any = None):
        assert isinstance(profile.flash, LabgridFlashSection)
        self.profile, self.dev, self.section, self.place = profile, dev, profile.flash, place
        dut = profile.dut.labgrid
        env = self.section.env or (dut.env if dut else None)
        if env is None:
            raise FlashFailed("[flash] kind = \"labgrid\" needs an env YAML",
                              "set [flash] env, or use the labgrid backend ([dut.labgrid] env)",
                              kind="invalid_input")
        target = self.section.target or (dut.target if dut else "main")
        coordinator = dut.coordinator if dut else None
        self.cfg = labgrid.LabgridConfig(env=env, target=target, coordinator=coordinator)

    def describe(self) -> str:
        return f"labgrid {self.cfg.target}: Strategy -> {self.section.state}"

    async def install(self, image: Path, before: ProcInstance | None, report: Report) -> ProcInstance:
        await report(f"{self.describe()} with images.{self.section.image_key} = {image.name}")
        try:
            await labgrid.transition(self.cfg, self.section.state, lease=self.place,
                                     images={self.section.image_key: str(image)})
        except labgrid.LabgridError:
            raise
        except Exception as exc:  # labgrid's strategies raise what their drivers raise
            raise FlashFailed(f"labgrid's Strategy failed to reach {self.section.state}: "
                              + labgrid.strategy_failure(exc),
                              "the board is now `unknown`: see the strategy's log, then lab_status") \
                from exc
        await report("waiting for the DUT to come back")
        return await back.target_back(self.dev, self.profile, before, self.section.timeout_s)
