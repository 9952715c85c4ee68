"""The typed lifespan every tool receives: profile, the DUT connection, lab state, progress,
and -- when guarded -- the guard and the transcript session every call is logged into.

Opened once per session (MCP server lifespan, a CLI call, a playbook run) and closed in
`finally`; tools import no singleton (STYLE: typed lifespan, no module globals).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labwarden.lab.boardstate import LabState
from labwarden.lab.config import LabProfile

if TYPE_CHECKING:
    from labwarden.guardrails.guard import Guard
    from labwarden.lab.dut.device import Device
    from labwarden.transcripts.store import TranscriptStore

ProgressFn = Callable[[float, float | None, str], Awaitable[None]]
current_progress: ContextVar[ProgressFn | None] = ContextVar("labwarden_progress", default=None)
"""Per-call progress sink (an MCP request's ctx.report_progress); concurrent calls each get
their own, while the LabContext is shared by the session."""


async def _no_progress(done: float, total: float | None, message: str) -> None:
    return None


@dataclass
class LabContext:
    profile: LabProfile
    device: Device
    data_dir: Path
    progress: ProgressFn = _no_progress
    messages: list[str] = field(default_factory=list)
    guard: Guard | None = None
    transcript: TranscriptStore | None = None
    session_id: str | None = None

    _state_cache: tuple[tuple[int, int, int], LabState] | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    """What the session learnt once about the DUT (e.g. whether it takes uprobes)."""
    _state_path: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        self._state_path = str(self.data_dir / "labstate.json")  # stat()ed on every call

    @property
    def state(self) -> LabState:
        """The lab state file, as a copy to change and save_state()."""
        return self.peek_state().model_copy(deep=True)

    def peek_state(self) -> LabState:
        """The lab state file, re-read only when it changed (the guard reads it on every call).
        Shared: read it, never change it (use `state` for that)."""
        try:
            st = os.stat(self._state_path)
            stamp = (st.st_mtime_ns, st.st_ino, st.st_size)  # save() renames a new file in
        except FileNotFoundError:
            return LabState()
        if self._state_cache is None or self._state_cache[0] != stamp:
            self._state_cache = (stamp, LabState.load(self.data_dir))
        return self._state_cache[1]

    def save_state(self, state: LabState) -> None:
        state.save(self.data_dir)

    async def report(self, done: float, total: float | None, message: str) -> None:
        self.messages.append(message)
        sink = current_progress.get() or self.progress
        await sink(done, total, message)

    def log(self, *events: Any, durable: bool = True) -> None:
        """Append transcript events in one transaction, committed before this returns (at most
        one fsync however many; none when not durable and the profile allows it); no-op when
        unlogged."""
        if self.transcript is not None and self.session_id is not None and events:
            durable = durable or self.profile.policy.transcript_fsync == "every_call"
            self.transcript.write(self.session_id, list(events), durable=durable)


def default_transcript(profile: LabProfile) -> Path:
    return profile.data_dir() / "transcripts.db"


@contextlib.asynccontextmanager
async def open_lab(profile: LabProfile, progress: ProgressFn = _no_progress,
                   user: str | None = None, *, client: str = "python", guarded: bool = True,
                   transcript: Path | None = None) -> AsyncIterator[LabContext]:
    """Connect to the DUT the profile names (acquiring its labgrid place first, if any); when
    guarded, every call passes the guard and lands in the transcript."""
    from labwarden.lab.dut.device import Device

    async with contextlib.AsyncExitStack() as stack:
        if profile.dut.backend == "labgrid":
            # imported here: labgrid's client pulls in gRPC, which the ssh backend never needs
            from labwarden.lab.labgrid import LabgridConfig, PlaceLease

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
        ctx = LabContext(profile=profile, device=device, data_dir=data_dir, progress=progress)
        if guarded:
            from labwarden.guardrails.guard import Guard
            from labwarden.transcripts.store import TranscriptStore

            ctx.transcript = TranscriptStore(transcript or default_transcript(profile))
            stack.callback(ctx.transcript.close)
            ctx.session_id = ctx.transcript.start_session(client, lab_profile=profile.source,
                                                          lab_name=profile.lab.name)
            holder = f"{user or getpass.getuser()}@{socket.gethostname()}/{ctx.session_id}"
            ctx.guard = Guard(ctx, holder)
            stack.push_async_callback(_close_session, ctx)
        yield ctx


async def _close_session(ctx: LabContext) -> None:
    assert ctx.guard is not None and ctx.transcript is not None and ctx.session_id is not None
    with contextlib.suppress(Exception):  # a dead DUT must not hide the session's end
        await ctx.guard.lease.release()
    ctx.transcript.end_session(ctx.session_id, "closed")
