"""The typed context every tool receives: the lab profile, the DUT, the board state, progress,
what the session learnt about the DUT, and -- when the session is logged -- its transcript.

Opened once per session by `labwarden.runtime.session.open_lab` (MCP server lifespan, a CLI
call, a playbook run) and closed there; tools import no singleton (STYLE: typed lifespan, no
module globals). The guard is not here: tools never see it (runtime/session.py holds it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from labwarden.lab.boardstate import BoardState, BoardStateFile
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.transcripts.store import TranscriptStore

log = logging.getLogger(__name__)
T = TypeVar("T")
ProgressFn = Callable[[float, float | None, str], Awaitable[None]]
current_progress: ContextVar[ProgressFn | None] = ContextVar("labwarden_progress", default=None)
"""Per-call progress sink (an MCP request's ctx.report_progress); concurrent calls each get
their own, while the LabContext is shared by the session."""


async def no_progress(done: float, total: float | None, message: str) -> None:
    return None


@dataclass
class LabContext:
    profile: LabProfile
    device: Device
    data_dir: Path
    progress: ProgressFn = no_progress
    messages: list[str] = field(default_factory=list)
    transcript: TranscriptStore | None = None
    session_id: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    """What the session learnt once about the DUT (e.g. whether it takes uprobes)."""
    place: Any = None
    """The session's labgrid PlaceLease (labgrid backend): drivers that act through the place
    (a labgrid flash) use it; None otherwise."""
    board: BoardStateFile = field(init=False, repr=False)
    _cleanups: set[asyncio.Future[Any]] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        self.board = BoardStateFile(self.data_dir)

    async def shielded(self, aw: Awaitable[T]) -> T:
        """Run a clean-up that must finish even when the call is cancelled (anyio cancels every
        await in a cancelled scope, clean-up included): as a task of its own, which the session
        waits for before it closes the DUT connection, and whose failure after its caller was
        cancelled is logged, never lost in an unretrieved task."""
        task = asyncio.ensure_future(aw)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanup_done)
        return await asyncio.shield(task)

    def _cleanup_done(self, task: asyncio.Future[Any]) -> None:
        self._cleanups.discard(task)
        if not task.cancelled() and task.exception() is not None:  # retrieved here, logged
            log.warning("a shielded clean-up failed: %s", task.exception())

    async def settle(self, timeout: float = 30.0) -> None:
        """Wait (bounded) for shielded clean-ups still running; called before the session closes."""
        if self._cleanups:
            await asyncio.wait(set(self._cleanups), timeout=timeout)

    @property
    def state(self) -> BoardState:
        """The board state, as a copy to change and save_state()."""
        return self.board.copy()

    def peek_state(self) -> BoardState:
        """The board state, shared: read it, never change it (use `state` for that)."""
        return self.board.peek()

    def save_state(self, state: BoardState) -> None:
        self.board.save(state)

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
