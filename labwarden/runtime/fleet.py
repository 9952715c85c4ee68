"""A fleet: one lab session per labgrid place, all in one transcript session and one record store.

The loop's session (the "home") runs the host-only calls (patch_submit, report, ...); every call
that needs a DUT runs on a place session (`PlacePool.session`): a place leased through the
coordinator (`lab.fleet.Fleet.lease`, a reservation kept alive while held), its own DUT
connection, its own board state (DATA/places/NAME/labstate.json: one board's health, flash rate
and fingerprint never leak to another), its own guard -- sharing the home's budget, so a fleet
spends one budget -- and the home's transcript session and records: one ledger, every event
stamped with its place (tools/context.LabContext.log).

A place session holds the DUT lease (the guard's) from its start, renewed in the background
until it ends: a call that moves to another place (an experiment's reproduction) never finds
its own place's lease taken over.

Health (LAVA's good/unknown/bad, with the reason): after a DUT call fails on a place, the place
is probed; a DUT that does not answer (or whose board the guard marked bad) makes the place
"bad" and the call is retried on another place -- never kept on partial data; the failed
attempt stays in the ledger. `Fleet.lease` is told to skip bad places. A bad place stays bad
until a person clears it (`labwarden lab clear-bad --place`, runtime/placeadmin.py); a place
whose board is unknown runs a health check before any call there (`PlacePool.prove`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labwarden.core.call import ToolCallRecord, ToolFailure
from labwarden.core.digest import bounded_args
from labwarden.core.errors import LabError
from labwarden.core.events import Note, ToolCalled
from labwarden.core.paths import within
from labwarden.core.placehealth import HealthState, HealthStore
from labwarden.guardrails.context import GuardContext
from labwarden.guardrails.guard import Guard
from labwarden.lab.boardstate import BoardStateFile
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.reach import unreachable_remedy
from labwarden.runtime.runner import RUNNER_DOOR, call_tool
from labwarden.runtime.session import LabSession, open_session
from labwarden.tools.context import LabContext

if TYPE_CHECKING:
    from labwarden.lab.fleet import Fleet
    from labwarden.lab.labgrid import PlaceLease

log = logging.getLogger(__name__)

HEALTH = "fleet-health"
"""Author of the Note a place's health change is logged as (the ledger says why a place left)."""
PROBE_TIMEOUT_S = 8.0
def place_dir(data_dir: Path, place: str) -> Path:
    """Where a place's own board state lives. The place name is the coordinator's, so it is
    checked as one plain component and the path resolved inside DATA/places (PathRefused)."""
    return within(data_dir / "places", place, what="place name")


def no_dut_endpoint() -> SshEndpoint:
    """The home session's DUT: none (every DUT call runs on a place). Never connected."""
    return SshEndpoint(host="fleet-home.invalid", key="/dev/null", known_hosts="/dev/null")


async def _keep_lease(guard: Guard) -> None:
    """Renew the place's DUT lease for as long as the place session lives."""
    while True:
        await asyncio.sleep(max(0.5, guard.lease.ttl_s / 3))
        try:
            await guard.lease.renew()
        except LabError as exc:
            log.warning("renewing the DUT lease on a place failed: %s", exc.problem)


def _failed(record: ToolCallRecord) -> str | None:
    """Why a call did not give its result (an experiment that could not be judged is such a
    call: its record says "failed"); None when it did."""
    if not record.ok:
        return record.error.message if record.error is not None else "no result"
    result = record.result or {}
    if result.get("decision") == "failed":
        return str(result.get("reason") or "failed")
    return None


class PlacePool:
    """The fleet's places for one home session: lease one, run a call there, release it."""

    def __init__(self, home: LabSession, fleet: Fleet, *, lease_timeout_s: float | None = None) -> None:
        self.home = home
        self.fleet = fleet
        self.health = HealthStore(home.data_dir)
        self.lease_timeout_s = lease_timeout_s
        self._closers: dict[int, Callable[[], Awaitable[None]]] = {}
        self._sweeping: dict[tuple[str, str], int] = {}
        self._queued = 0
        """Calls waiting for their first place (`call`)."""

    @contextlib.contextmanager
    def sweeping(self, place: str, build: str) -> Iterator[None]:
        """Mark a full sweep of `build` on `place` as under way (a survivor's sweep of A: another
        survivor of the same base waits for that place rather than sweeping A on its own)."""
        key = (place, build)
        self._sweeping[key] = self._sweeping.get(key, 0) + 1
        try:
            yield
        finally:
            self._sweeping[key] -= 1
            if not self._sweeping[key]:
                del self._sweeping[key]

    def is_sweeping(self, place: str, build: str | None = None) -> bool:
        """Whether a full sweep of `build` (None: of any build) is under way on `place`."""
        return any(p == place and build in (None, b) for p, b in self._sweeping)

    def profile_of(self, place: str) -> LabProfile:
        return place_profile(self.home.profile, place)

    async def hand_back(self, ctx: LabContext) -> None:
        """End a place session early and release its place (a call that moves on to another
        place: the experiment's reproduction waits for one holding none -- two experiments
        that each wait for the other's place would wait for ever). Idempotent."""
        close = self._closers.pop(id(ctx), None)
        if close is not None:
            await close()
        if ctx.place is not None:
            await ctx.place.release()

    async def good_places(self, exclude: Collection[str] = ()) -> list[str]:
        bad = self.health.bad()
        return [p for p in await self.fleet.places() if p not in bad and p not in exclude]

    @property
    def queued(self) -> int:
        """Calls waiting for a place to start on."""
        return self._queued

    async def idle_places(self) -> list[str]:
        """Good places nobody holds at the coordinator: neither a session of this pool's (its
        place stays acquired until released) nor another client (a place a rival loop holds is
        not free for this pool's next call)."""
        bad = self.health.bad()
        return [p for p in await self.fleet.free_places() if p not in bad]

    @contextlib.asynccontextmanager
    async def session(self, *, exclude: Collection[str] = (), prefer: str | None = None,
                      timeout_s: float | None = None, prio: float = 0.0) -> AsyncIterator[LabSession]:
        """A lab session on a free good place not in `exclude` (waits for one, at most
        `timeout_s` if given; before waiters of a lower `prio`), released after. A place whose
        board is unknown proves itself first (`prove`); one that fails is marked bad and
        another is taken."""
        tried = set(exclude)
        while True:
            lease = await self.fleet.lease(exclude={*tried, *self.health.bad()}, prefer=prefer,
                                           timeout_s=timeout_s if timeout_s is not None
                                           else self.lease_timeout_s, prio=prio)
            assert lease.place is not None
            try:
                async with open_place(self.home, lease, self) as ctx:
                    why = await self.prove(ctx)
                    if why is None:
                        yield ctx
                        return
                    self.mark(lease.place, "bad", why)
            finally:
                await lease.release()
            tried.add(lease.place)

    async def prove(self, ctx: LabContext) -> str | None:
        """A place whose board is unknown (a flash it did not come back from; a person cleared
        it) runs the health check the guard asks for before anything else there, as a single
        board must: flash the last image verified on it (else the profile's baseline), then
        fingerprint_verify it. Why it failed, or None (the board is good, or now proved)."""
        state = ctx.peek_state()
        if state.board_health != "unknown":
            return None
        image = state.verified_build or ctx.profile.build.baseline
        if image is None:
            return (f"its board is unknown ({state.health_reason}) and no image is known good "
                    "there to run a health check with")
        for name in ("flash", "fingerprint_verify"):
            why = _failed(await call_tool(ctx, name, {"build_id": image}))
            if why is not None:
                return f"health check failed at {name} of {image}: {why[:200]}"
        if ctx.peek_state().board_health != "good":
            return f"health check did not prove {image}: {ctx.peek_state().health_reason}"
        return None

    def mark(self, place: str, state: HealthState, reason: str | None) -> None:
        if self.health.mark(place, state, reason):
            note = Note(author=HEALTH, text=json.dumps({"place": place, "state": state,
                                                        "reason": reason}))
            note.place = place
            self.home.log(note)

    async def probe(self, ctx: LabContext) -> str | None:
        """Why the place's DUT is bad (it does not answer; the guard marked its board bad), or
        None. A fresh connection with a short timeout: the session's may be the one that died."""
        if ctx.peek_state().board_health == "bad":
            return f"board marked bad by the guard: {ctx.peek_state().health_reason or 'no reason'}"
        device = Device(ctx.device.endpoint, connect_timeout=PROBE_TIMEOUT_S / 2, retries=2,
                        env=ctx.profile.dut.env)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S * 2):
                res = await device.run(["true"], timeout=PROBE_TIMEOUT_S)
            if res.exit_status == 0:
                return None
            return f"the DUT answers but its shell's true command exited {res.exit_status}"
        except (LabError, TimeoutError) as exc:
            return f"the DUT does not answer: {getattr(exc, 'problem', None) or 'timed out'}"
        finally:
            with contextlib.suppress(Exception):
                await device.close()

    async def call(self, name: str, args: dict[str, Any]) -> ToolCallRecord:
        """Run one call on a free good place. When it fails because its place died, the place
        is marked bad and the call runs again on another; the loop goes on either way (a call
        with no good place left returns a failure saying so)."""
        tried: list[str] = []
        record: ToolCallRecord | None = None
        while True:
            try:
                if not await self.good_places(tried):
                    if record is not None:
                        return record
                    raise LabError(f"no good place left in the fleet for {name} (bad: "
                                   f"{', '.join(sorted(self.health.bad())) or 'none'})",
                                   "bring the places' DUTs back, then clear them in "
                                   f"{self.health.path}", kind="device")
                self._queued += 1
                started = False
                try:
                    async with self.session(exclude=tried) as ctx:
                        self._queued -= 1
                        started = True
                        place = ctx.place_name
                        assert place is not None
                        record = await call_tool(ctx, name, args)
                        why = _failed(record)
                        dead = await self.probe(ctx) if why is not None else None
                finally:
                    if not started:
                        self._queued -= 1
            except LabError as exc:  # no place for it: the call fails, the loop goes on
                record = ToolCallRecord(tool=name, args=bounded_args(args), ok=False,
                                        error=ToolFailure.of(exc))
                self.home.log(ToolCalled.of(record), durable=False)
                return record
            if dead is None:
                if why is None:
                    self.mark(place, "good", None)
                return record
            self.mark(place, "bad", f"{dead} (while {name} ran: {(why or '')[:200]})")
            tried.append(place)


FLEET_WIDE = ("build", "decision", "gates", "policy")
"""What a place takes from the fleet's profile, whatever its own says: one build store and
repo (submitted patches found by id), one pre-registered rule, one set of gates, one policy.
The one exception is [decision] parity_check, a command run on the DUT: the place's own when it
declares one (place_profile)."""


def place_profile(home: LabProfile, place: str) -> LabProfile:
    """The profile a place's calls run with: its own (`[dut.labgrid] place_profiles`: a vlab
    fleet's DUT paths differ per place) for the DUT side -- [dut], [flash], [load], [target],
    [topology], [readers], [levers] -- with the fleet's data dir (one ledger) and the fleet's
    FLEET_WIDE sections; the fleet's own profile when none is named."""
    lg = home.dut.labgrid
    named = (lg.place_profiles or {}).get(place) if lg is not None else None
    if not named:
        return home
    path = Path(named).expanduser()
    if not path.is_absolute() and home.source:
        path = Path(home.source).parent / path
    own = LabProfile.from_file(path)
    if own.dut.place is not None and own.dut.place.name != place:  # its DUT is another place's
        raise LabError(f"{path}: [dut.place] name is {own.dut.place.name}, and the fleet's "
                       f"place_profiles names it for place {place}",
                       "fix [dut.labgrid] place_profiles in the fleet's profile, or the place's [dut.place]",
                       kind="invalid_input")
    lab = home.lab.model_copy(update={"data_dir": str(home.data_dir())})
    wide = {k: getattr(home, k) for k in FLEET_WIDE}
    if own.decision.parity_check:  # the rule is the fleet's, its DUT-side check the place's: on
        # a vlab fleet it names the place's own socket (with the fleet's, every place but the
        # first checked another DUT's replies, and a functional regression passed there)
        wide["decision"] = home.decision.model_copy(update={"parity_check": own.decision.parity_check})
    return own.model_copy(update={"lab": lab, **wide})


@contextlib.asynccontextmanager
async def open_place(home: LabSession, lease: PlaceLease, pool: PlacePool) -> AsyncIterator[LabSession]:
    """A lab session on a leased place: its own DUT connection (opened on first use), board
    state and guard (the home's budget), the home's transcript session and data dir."""
    assert home.guard is not None and lease.place is not None
    profile = place_profile(home.profile, lease.place)
    device = Device(lease.endpoint(), env=profile.dut.env, unreachable_remedy=unreachable_remedy(profile))
    device.place = lease
    ctx = LabSession(profile=profile, device=device, data_dir=home.data_dir, progress=home.progress,
                     transcript=home.transcript, session_id=home.session_id,
                     principal=home.principal, place=lease, door=RUNNER_DOOR,
                     place_name=lease.place, fleet=pool)
    ctx.board = BoardStateFile(place_dir(home.data_dir, lease.place))
    ctx.board.data_dir.mkdir(parents=True, exist_ok=True)
    guard = Guard(GuardContext(profile=profile, device=device, board=ctx.board), home.guard.lease.holder)
    guard.budget = home.guard.budget  # one budget for the fleet
    ctx.guard = guard
    keeper: asyncio.Task[None] | None = None
    closed = False

    async def close() -> None:
        nonlocal closed
        if closed:
            return
        closed = True
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        await ctx.settle()
        if guard.lease.held:
            with contextlib.suppress(Exception):  # a dead DUT must not stop the release
                await guard.lease.release()
        with contextlib.suppress(Exception):
            await device.close()

    pool._closers[id(ctx)] = close
    try:
        with contextlib.suppress(LabError):  # a dead DUT: the call says so, and the probe after
            if await guard.lease.acquire() is None:
                keeper = asyncio.create_task(_keep_lease(guard))
        yield ctx
    finally:
        pool._closers.pop(id(ctx), None)
        await close()


def is_fleet(profile: LabProfile) -> bool:
    """Whether the profile names a fleet (`[dut.labgrid] places`, `place_match` or `place_tags`)."""
    lg = profile.dut.labgrid
    return profile.dut.backend == "labgrid" and lg is not None and bool(
        lg.places or lg.place_match or lg.place_tags)


@contextlib.asynccontextmanager
async def open_fleet(profile: LabProfile, user: str | None = None, *, client: str = "loop",
                     transcript: Path | None = None,
                     lease_timeout_s: float | None = None) -> AsyncIterator[tuple[LabSession, PlacePool]]:
    """The home session of a fleet (no DUT of its own) and its place pool."""
    from labwarden.lab.fleet import Fleet
    from labwarden.lab.labgrid import LabgridConfig

    assert profile.dut.labgrid is not None
    fleet = Fleet(LabgridConfig(**profile.dut.labgrid.model_dump()), user=user)
    device = Device(no_dut_endpoint(), unreachable_remedy="a fleet's home session has no DUT: "
                    "every call that needs one runs on a place")
    try:
        async with open_session(profile, device, user=user, client=client,
                                transcript=transcript) as home:
            yield home, PlacePool(home, fleet, lease_timeout_s=lease_timeout_s)
    finally:
        with contextlib.suppress(Exception):
            await device.close()
