"""The typed context every tool receives: the lab profile, the DUT, the board state, progress,
what the session learnt about the DUT, and -- when the session is logged -- its transcript.

Opened once per session by `labwarden.runtime.session.open_lab` (MCP server lifespan, a CLI
call, a playbook run) and closed there; tools import no singleton (STYLE: typed lifespan, no
module globals). The guard is not here: tools never see it (runtime/session.py holds it).

A tool that needs another tool's effect asks the context (`await ctx.call("flash", {...})`),
never that tool's module: the session's door (runtime/runner.py) runs it as a nested call --
the same guard (requirements, heals, flash budget), the parent's lease, its own transcript
event carrying the parent's id. `ctx.heal()` asks the same guard to heal what drifted under a
running call (a reboot by a nested flash), recorded as a guard decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, overload

from pydantic import BaseModel

from labwarden.core.call import ToolCallRecord
from labwarden.core.errors import LabError, ToolError
from labwarden.core.placehealth import HealthState, HealthStore
from labwarden.core.spec import Requirement
from labwarden.lab import knobs
from labwarden.lab.boardstate import BoardState, BoardStateFile
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.transcripts.store import TranscriptStore

log = logging.getLogger(__name__)
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
ProgressFn = Callable[[float, float | None, str], Awaitable[None]]
current_progress: ContextVar[ProgressFn | None] = ContextVar("labwarden_progress", default=None)
"""Per-call progress sink (an MCP request's ctx.report_progress); concurrent calls each get
their own, while the LabContext is shared by the session."""
current_messages: ContextVar[list[str] | None] = ContextVar("labwarden_messages", default=None)
"""Per-call list of progress messages (the runner's, for the call's record): concurrent calls
never mix theirs, and a long session keeps none."""


async def no_progress(done: float, total: float | None, message: str) -> None:
    return None


class PlaceSessions(Protocol):
    """What a tool may ask of the fleet's place pool (runtime/fleet.PlacePool, a layer above):
    which places are good, a session on another place, its own place handed back, a place
    probed or marked (an experiment's reproduction, a bisection split over places), the profile
    a place's calls run with, and which full sweeps are under way where."""

    health: HealthStore

    async def good_places(self, exclude: Collection[str] = ()) -> list[str]: ...

    def session(self, *, exclude: Collection[str] = (), prefer: str | None = None,
                timeout_s: float | None = None,
                prio: float = 0.0) -> AbstractAsyncContextManager[LabContext]: ...

    async def hand_back(self, ctx: LabContext) -> None: ...

    async def probe(self, ctx: LabContext) -> str | None: ...

    def mark(self, place: str, state: HealthState, reason: str | None) -> None: ...

    def profile_of(self, place: str) -> LabProfile: ...

    def sweeping(self, place: str, build: str) -> AbstractContextManager[None]: ...

    def is_sweeping(self, place: str, build: str | None = None) -> bool: ...


class Door(Protocol):
    """How a session runs the nested work its tools ask for (runtime/runner.py implements it)."""

    async def call(self, ctx: LabContext, name: str, args: dict[str, Any]) -> ToolCallRecord: ...

    async def heal(self, ctx: LabContext, requires: frozenset[Requirement] | None) -> list[str]: ...


def failure(record: ToolCallRecord) -> LabError:
    """A failed nested call as the error its parent raises: kind, code, remedy and lines kept."""
    err = record.error
    if err is None:
        return ToolError("internal", f"{record.tool} returned no result")
    return LabError(f"{record.tool}: {err.message}", err.remedy or "", kind=err.kind, code=err.code,
                    lines=err.lines)


@dataclass
class LabContext:
    profile: LabProfile
    device: Device
    data_dir: Path
    progress: ProgressFn = no_progress
    messages: list[str] = field(default_factory=list)
    transcript: TranscriptStore | None = None
    session_id: str | None = None
    principal: str | None = None
    """Who the session acts for (transcripts/access.py: which sessions it may read)."""
    facts: dict[str, Any] = field(default_factory=dict)
    """What the session learnt once about the DUT (e.g. whether it takes uprobes)."""
    place: Any = None
    """The session's labgrid PlaceLease (labgrid backend): drivers that act through the place
    (a labgrid flash) use it; None otherwise."""
    door: Door | None = None
    """Where `call` and `heal` go: the session's runner (guarded, or not when the session is
    unguarded; logged when it is). Only a context no session opened has none."""
    place_name: str | None = None
    """The fleet place this session runs on (runtime/fleet.py): stamped on every event it logs.
    None off a fleet."""
    fleet: PlaceSessions | None = None
    """The fleet's place pool (runtime/fleet.PlacePool) when the session runs on one: where a
    tool finds another place (an experiment's reproduction). None off a fleet."""
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
        mine = current_messages.get()
        (mine if mine is not None else self.messages).append(message)
        sink = current_progress.get() or self.progress
        await sink(done, total, message)

    def note(self, message: str) -> None:
        """A progress line for the call's record, without sending it (no await: usable after
        the client gave up)."""
        mine = current_messages.get()
        (mine if mine is not None else self.messages).append(message)

    def log(self, *events: Any, durable: bool = True) -> None:
        """Append transcript events in one transaction, committed before this returns (at most
        one fsync however many; none when not durable and the profile allows it); no-op when
        unlogged."""
        if self.transcript is not None and self.session_id is not None and events:
            if self.place_name is not None:
                for ev in events:
                    if getattr(ev, "place", "") is None:
                        ev.place = self.place_name
            durable = durable or self.profile.policy.transcript_fsync == "every_call"
            self.transcript.write(self.session_id, list(events), durable=durable)

    @overload
    async def call(self, name: str, args: dict[str, Any] | BaseModel, output: type[M]) -> M: ...

    @overload
    async def call(self, name: str, args: dict[str, Any] | BaseModel, output: None = None) -> Any: ...

    async def call(self, name: str, args: dict[str, Any] | BaseModel,
                   output: type[BaseModel] | None = None) -> Any:
        """Run tool `name` as a nested call of the running one and return its output model (an
        `output` given: checked to be that model, and typed so); raise its failure (a refusal
        too: kind, code and remedy kept) as a LabError."""
        if isinstance(args, BaseModel):
            args = args.model_dump(mode="json", exclude_unset=True)
        if self.door is None:
            raise ToolError("internal", f"no door for the nested call {name!r}: this context was "
                            "not opened by a session", "open the lab with runtime.session.open_lab")
        record = await self.door.call(self, name, args)
        if not record.ok:
            raise failure(record)
        if output is not None and not isinstance(record.output, output):
            raise ToolError("internal", f"the nested {name} call returned "
                            f"{type(record.output).__name__}, not {output.__name__}",
                            "ask for the output model the tool's spec names (labwarden.results)")
        return record.output

    async def heal(self, requires: frozenset[Requirement] | None = None) -> list[str]:
        """Heal what drifted under the running call (a nested flash rebooted the DUT) as
        `[policy] heal` allows -- through the guard, so it is a guard decision like any heal;
        a drift the policy may not heal raises its refusal. `requires`: the requirements whose
        knobs to heal (default: the running tool's). Returns what changed."""
        if self.door is not None:
            return await self.door.heal(self, requires)
        return await heal_unguarded(self, requires)


async def heal_unguarded(ctx: LabContext, requires: frozenset[Requirement] | None) -> list[str]:
    """A context without a guard (unguarded session, bare context) re-pins as the guard would:
    the same knobs, the same `[policy] heal`, the same pin()."""
    heal = set(ctx.profile.policy.heal)
    changes: list[str] = []
    for knob in knobs.pinned(ctx.device, ctx.profile):
        if requires is not None and knob.requirement not in requires:
            continue
        state = await knob.state()
        if state.ok:
            continue
        if knob.name not in heal:
            raise ToolError("refused", f"{knob.name} is {state.value} and [policy] heal does "
                            "not allow healing it", knob.remedy)
        changes += await knob.pin()
        if not (await knob.state()).ok:
            raise ToolError("device", f"{knob.name} still not pinned after healing",
                            "check the paths and [topology] in the lab profile")
    return changes
