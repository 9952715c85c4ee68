"""A lab session: the DUT connection, the guard and the transcript session every call lands in.

`open_lab` is the one way every door (a CLI call, a playbook, the agent) opens a lab; it yields
a `LabSession`, the `LabContext` tools receive plus the guard that only the runner and the agent
use. A server that serves several clients at once opens the lab once (`open_hub`: one DUT
connection) and gives each client session a `LabSession` of its own -- its own transcript
session, budget and lease holder -- opened on first use and closed when that client leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import getpass
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from labwarden.core.errors import LabError
from labwarden.core.events import Note
from labwarden.guardrails.context import GuardContext
from labwarden.guardrails.guard import Guard
from labwarden.guardrails.lease import holder_name
from labwarden.lab.config import LabProfile, ProfileError
from labwarden.lab.dut.device import Device
from labwarden.lab.reach import unreachable_remedy
from labwarden.runtime import profile_reload
from labwarden.runtime.runner import RUNNER_DOOR
from labwarden.tools.context import LabContext, ProgressFn, no_progress
from labwarden.transcripts.store import TranscriptStore

log = logging.getLogger(__name__)


@dataclass
class LabSession(LabContext):
    guard: Guard | None = None


def default_transcript(profile: LabProfile) -> Path:
    return profile.data_dir() / "transcripts.db"


@functools.cache
def login_name() -> str:
    """Who runs this process. Read once: without USER/LOGNAME in the environment (an MCP client
    starts a stdio server with few variables) getpass reads /etc/passwd, and the server asks on
    every request."""
    return getpass.getuser()


def local_principal(user: str | None = None) -> str:
    """The principal of whoever runs labwarden on this host (CLI, stdio, in-process)."""
    return f"local:{user or login_name()}"


def refuse_fleet(profile: LabProfile) -> None:
    """LabError when the profile names a fleet: a lab session (call, serve, a playbook) runs on
    one DUT. Its env names a template place, and a vlab fleet's DUT side is per place: one session
    on it would silently run on the template's place with the wrong paths."""
    lg = profile.dut.labgrid
    if profile.dut.backend == "labgrid" and lg is not None and (lg.places or lg.place_match or lg.place_tags):
        raise LabError(
            f"{profile.source or 'the profile'} names a fleet ([dut.labgrid] places, place_match or "
            "place_tags): a lab session runs on one place",
            "run `labwarden loop --lab PROFILE` (it spreads experiments over the places), or point "
            "--lab at one place's own profile ([dut.labgrid] place_profiles: each holds its place at "
            "the coordinator for every call that touches its DUT)")


@contextlib.asynccontextmanager
async def open_device(profile: LabProfile, user: str | None = None, *,
                      connect: bool = True) -> AsyncIterator[Device]:
    """The DUT the profile names (its labgrid place acquired first, if any); `connect=False`
    connects only when something first asks the DUT.

    A fleet place's own profile ([dut.place]) gets a lease of that place, not acquired here:
    the guard holds it at the coordinator before every call that touches the DUT (and refuses
    the call, naming the holder, when someone else has it); released when the device closes.
    Its DUT connection opens only when a call first asks the DUT -- after the guard held the
    place."""
    refuse_fleet(profile)
    async with contextlib.AsyncExitStack() as stack:
        place = None
        if profile.dut.backend == "labgrid":
            # imported here: labgrid's client pulls in gRPC, which the ssh backend never needs
            from labwarden.lab.labgrid import LabgridConfig, PlaceLease

            assert profile.dut.labgrid is not None
            cfg = LabgridConfig(**profile.dut.labgrid.model_dump())
            lease = PlaceLease(cfg, user=user)
            if lease.place is not None and profile.dut.place is not None:
                raise LabError(f"{profile.source or 'the profile'}: [dut.place] names place "
                               f"{profile.dut.place.name} and the env's RemotePlace names {lease.place}",
                               "keep one: the RemotePlace (held for the session) or [dut.place]")
            await stack.enter_async_context(lease)  # acquired for the session, released after
            endpoint = lease.endpoint()
            place = lease
        else:
            endpoint = profile.ssh_endpoint()
        if (place is None or place.place is None) and profile.dut.place is not None:
            from labwarden.lab.labgrid import PlaceLease

            place = PlaceLease.named(profile.dut.place.name, profile.dut.place.coordinator, user=user)
            stack.push_async_callback(place.release)  # only if held: never someone else's
            connect = False  # not before the guard holds the place
        device = Device(endpoint, env=profile.dut.env, unreachable_remedy=unreachable_remedy(profile))
        device.place = place
        if connect:
            await stack.enter_async_context(device)
        else:
            stack.push_async_callback(device.close)
        yield device


@contextlib.asynccontextmanager
async def open_session(profile: LabProfile, device: Device, progress: ProgressFn = no_progress,
                       user: str | None = None, *, client: str = "python", guarded: bool = True,
                       transcript: Path | None = None, principal: str | None = None,
                       mcp_session_id: str | None = None) -> AsyncIterator[LabSession]:
    """A session over an open DUT connection; when guarded, every call passes its own guard
    (budget, lease holder) and lands in its own transcript session."""
    async with contextlib.AsyncExitStack() as stack:
        data_dir = profile.data_dir()
        data_dir.mkdir(parents=True, exist_ok=True)
        ctx = LabSession(profile=profile, device=device, data_dir=data_dir, progress=progress,
                         place=device.place, door=RUNNER_DOOR)
        if guarded:
            ctx.transcript = TranscriptStore(transcript or default_transcript(profile))
            stack.callback(ctx.transcript.close)
            ctx.principal = principal or local_principal(user)
            ctx.session_id = ctx.transcript.start_session(
                client, lab_profile=profile.source, lab_name=profile.lab.name,
                principal=ctx.principal, mcp_session_id=mcp_session_id)
            holder = holder_name(user or login_name(), ctx.session_id)
            ctx.guard = Guard(GuardContext(profile=profile, device=device, board=ctx.board), holder)
            stack.push_async_callback(_close_session, ctx)
        stack.push_async_callback(ctx.settle)  # runs first: clean-ups finish on a live connection
        yield ctx


@contextlib.asynccontextmanager
async def open_lab(profile: LabProfile, progress: ProgressFn = no_progress,
                   user: str | None = None, *, client: str = "python", guarded: bool = True,
                   transcript: Path | None = None, connect: bool = True) -> AsyncIterator[LabSession]:
    """Connect to the DUT the profile names (acquiring its labgrid place first, if any); when
    guarded, every call passes the guard and lands in the transcript. `connect=False` opens
    the DUT connection only when a call first needs it (a report needs no DUT)."""
    async with open_device(profile, user, connect=connect) as device, \
            open_session(profile, device, progress, user, client=client, guarded=guarded,
                         transcript=transcript) as ctx:
        yield ctx


async def _close_session(ctx: LabSession) -> None:
    assert ctx.guard is not None and ctx.transcript is not None and ctx.session_id is not None
    if ctx.guard.lease.held:
        with contextlib.suppress(Exception):  # a dead DUT must not hide the session's end
            await ctx.guard.lease.release()
    ctx.transcript.end_session(ctx.session_id, "closed")  # writes its anchor too


class LabHub:
    """A lab opened once for a server: one DUT connection, and one `LabSession` per client
    session (key), opened on first use. Each has its own transcript session, budget and lease
    holder: clients never share a budget, and one client's lease is another's `lease_held`."""

    def __init__(self, profile: LabProfile, device: Device, *, client: str, user: str | None,
                 transcript: Path | None) -> None:
        self.profile = profile
        self.device = device
        self.client = client
        self.user = user
        self.transcript = transcript
        self._sessions: dict[str, tuple[LabSession, contextlib.AsyncExitStack]] = {}
        self._lock = asyncio.Lock()
        self._watch = profile_reload.ProfileWatch.of(profile)
        self._old_devices: list[Device] = []

    @property
    def data_dir(self) -> Path:
        return self.profile.data_dir()

    def sessions(self) -> dict[str, LabSession]:
        return {k: v[0] for k, v in self._sessions.items()}

    async def session(self, key: str, *, principal: str | None = None,
                      mcp_session_id: str | None = None) -> LabSession:
        """The session of `key`, opened now if it is new."""
        found = self._sessions.get(key)
        if found is not None:
            return found[0]
        async with self._lock:  # two first requests of one client open one session
            found = self._sessions.get(key)
            if found is not None:
                return found[0]
            stack = contextlib.AsyncExitStack()
            ctx = await stack.enter_async_context(open_session(
                self.profile, self.device, user=self.user, client=self.client,
                transcript=self.transcript, principal=principal, mcp_session_id=mcp_session_id))
            self._sessions[key] = (ctx, stack)
            return ctx

    def reload_profile(self) -> str | None:
        """Pick up an edited profile file (runtime/profile_reload.py): validated first; a valid
        one replaces the profile of the hub and of every open session (and the DUT connection
        when [dut.ssh] changed), an invalid one is refused and the one in use kept. Either way
        the change is a Note in every open session. Returns the note (None: nothing changed)."""
        digest = self._watch.changed()
        if digest is None or self._watch.path is None:
            return None
        path, old = self._watch.path, self.profile
        try:
            new = LabProfile.from_file(path)
            why = profile_reload.cannot_apply(
                old, new, lease_held=any(s.guard is not None and s.guard.lease.held
                                         for s, _ in self._sessions.values()))
        except ProfileError as exc:
            why = "it is not valid:\n  - " + "\n  - ".join(exc.problems)
        if why is not None:
            self._watch.refused = digest
            text = f"lab profile {path} changed; the change is refused and the profile in use kept: {why}"
            log.warning("%s", text)
        else:
            sections = profile_reload.changed_sections(old, new)
            self._apply(new, dut_changed="dut" in sections)
            self._watch.digest, self._watch.refused = digest, None
            text = (f"lab profile {path} reloaded: [{'], ['.join(sections)}] changed; the next "
                    "calls use it" if sections else f"lab profile {path} rewritten, same values")
        for ctx, _ in self._sessions.values():
            with contextlib.suppress(Exception):  # a full disk must not stop the server
                ctx.log(Note(author=profile_reload.AUTHOR, text=text))
        return text

    def _apply(self, new: LabProfile, *, dut_changed: bool) -> None:
        if dut_changed:  # ssh backend only (cannot_apply): a new connection to the new address
            self._old_devices.append(self.device)
            self.device = Device(new.ssh_endpoint(), env=new.dut.env,
                                 unreachable_remedy=unreachable_remedy(new))
        self.profile = new
        for ctx, _ in self._sessions.values():
            ctx.profile, ctx.device = new, self.device
            if dut_changed:
                ctx.facts.clear()  # what it learnt was about the other DUT
            if ctx.guard is not None:
                g = ctx.guard
                g.ctx = dataclasses.replace(g.ctx, profile=new, device=self.device)
                g.budget.limits = new.policy.budgets
                g.flashes.limit = new.policy.budgets.flashes_per_hour
                g.lease.dev, g.lease.ttl_s = self.device, new.policy.lease_ttl_s

    async def close(self, key: str) -> None:
        """End the session of `key` (its client left): clean-ups, lease, session_ended, anchor."""
        found = self._sessions.pop(key, None)
        if found is not None:
            await found[1].aclose()

    async def aclose(self) -> None:
        for key in list(self._sessions):
            with contextlib.suppress(Exception):
                await self.close(key)
        for dev in [*self._old_devices, self.device]:  # open_device closes the first one only
            with contextlib.suppress(Exception):
                await dev.close()


@contextlib.asynccontextmanager
async def open_hub(profile: LabProfile, *, client: str, user: str | None = None,
                   transcript: Path | None = None) -> AsyncIterator[LabHub]:
    """Open the lab for a server: sessions as clients arrive, the DUT connection when a call
    first needs it (a server starts, lists its tools and answers lab_status with the DUT off;
    the connection comes back by itself after the DUT reboots); every session still open is
    ended when the server stops."""
    async with open_device(profile, user, connect=False) as device:
        hub = LabHub(profile, device, client=client, user=user, transcript=transcript)
        try:
            yield hub
        finally:
            await hub.aclose()
