"""A lab session: the DUT connection, the guard and the transcript session every call lands in.

`open_lab` is the one way every door (MCP server lifespan, `labwarden call`, a playbook, the
agent) opens a lab; it yields a `LabSession`, the `LabContext` tools receive plus the guard
that only the runner and the agent use.
"""

from __future__ import annotations

import contextlib
import getpass
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from labwarden.guardrails.context import GuardContext
from labwarden.guardrails.guard import Guard
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.tools.context import LabContext, ProgressFn, no_progress
from labwarden.transcripts.store import TranscriptStore


@dataclass
class LabSession(LabContext):
    guard: Guard | None = None


def default_transcript(profile: LabProfile) -> Path:
    return profile.data_dir() / "transcripts.db"


@contextlib.asynccontextmanager
async def open_lab(profile: LabProfile, progress: ProgressFn = no_progress,
                   user: str | None = None, *, client: str = "python", guarded: bool = True,
                   transcript: Path | None = None, connect: bool = True) -> AsyncIterator[LabSession]:
    """Connect to the DUT the profile names (acquiring its labgrid place first, if any); when
    guarded, every call passes the guard and lands in the transcript. `connect=False` opens
    the DUT connection only when a call first needs it (a report needs no DUT)."""
    async with contextlib.AsyncExitStack() as stack:
        place = None
        if profile.dut.backend == "labgrid":
            # imported here: labgrid's client pulls in gRPC, which the ssh backend never needs
            from labwarden.lab.labgrid import LabgridConfig, PlaceLease

            assert profile.dut.labgrid is not None
            lease = PlaceLease(LabgridConfig(**profile.dut.labgrid.model_dump()), user=user)
            await stack.enter_async_context(lease)  # acquired for the session, released after
            target = lease.target()
            place = lease
        else:
            target = profile.ssh_endpoint()
        device = Device(target, env=profile.dut.env)
        if connect:
            await stack.enter_async_context(device)
        else:
            stack.push_async_callback(device.close)
        data_dir = profile.data_dir()
        data_dir.mkdir(parents=True, exist_ok=True)
        ctx = LabSession(profile=profile, device=device, data_dir=data_dir, progress=progress,
                         place=place)
        if guarded:
            ctx.transcript = TranscriptStore(transcript or default_transcript(profile))
            stack.callback(ctx.transcript.close)
            ctx.session_id = ctx.transcript.start_session(client, lab_profile=profile.source,
                                                          lab_name=profile.lab.name)
            holder = f"{user or getpass.getuser()}@{socket.gethostname()}/{ctx.session_id}"
            ctx.guard = Guard(GuardContext(profile=profile, device=device, board=ctx.board), holder)
            stack.push_async_callback(_close_session, ctx)
        stack.push_async_callback(ctx.settle)  # runs first: clean-ups finish on a live connection
        yield ctx


async def _close_session(ctx: LabSession) -> None:
    assert ctx.guard is not None and ctx.transcript is not None and ctx.session_id is not None
    if ctx.guard.lease.held:
        with contextlib.suppress(Exception):  # a dead DUT must not hide the session's end
            await ctx.guard.lease.release()
    ctx.transcript.end_session(ctx.session_id, "closed")
