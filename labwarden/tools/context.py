"""The typed lifespan every tool receives: profile, the DUT connection, lab state, progress.

Opened once per session (MCP server lifespan, a CLI call, a playbook run) and closed in
`finally`; tools import no singleton (STYLE: typed lifespan, no module globals).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labwarden.lab.labstate import LabState
from labwarden.lab.profile import LabProfile

if TYPE_CHECKING:
    from labwarden.lab.device import Device

ProgressFn = Callable[[float, float | None, str], Awaitable[None]]


async def _no_progress(done: float, total: float | None, message: str) -> None:
    return None


@dataclass
class LabContext:
    profile: LabProfile
    device: Device
    data_dir: Path
    progress: ProgressFn = _no_progress
    messages: list[str] = field(default_factory=list)

    @property
    def state(self) -> LabState:
        return LabState.load(self.data_dir)

    def save_state(self, state: LabState) -> None:
        state.save(self.data_dir)

    async def report(self, done: float, total: float | None, message: str) -> None:
        self.messages.append(message)
        await self.progress(done, total, message)


@contextlib.asynccontextmanager
async def open_lab(profile: LabProfile, progress: ProgressFn = _no_progress,
                   user: str | None = None) -> AsyncIterator[LabContext]:
    """Connect to the DUT the profile names (acquiring its labgrid place first, if any)."""
    from labwarden.lab.device import Device

    async with contextlib.AsyncExitStack() as stack:
        if profile.dut.backend == "labgrid":
            # imported here: labgrid's client pulls in gRPC, which the ssh backend never needs
            from labwarden.lab.labgrid_backend import LabgridConfig
            from labwarden.lab.labgrid_place import PlaceLease

            assert profile.dut.labgrid is not None
            lease = PlaceLease(LabgridConfig(**profile.dut.labgrid.model_dump()), user=user)
            await stack.enter_async_context(lease)  # acquired for the session, released after
            target = lease.target()
        else:
            target = profile.ssh_target()
        device = Device(target)
        await stack.enter_async_context(device)
        data_dir = profile.data_dir()
        data_dir.mkdir(parents=True, exist_ok=True)
        yield LabContext(profile=profile, device=device, data_dir=data_dir, progress=progress)
