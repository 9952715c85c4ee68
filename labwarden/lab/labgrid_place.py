"""Hold a labgrid place for a session: acquire it through the coordinator, release it at the end.

Only an env whose target has a `RemotePlace` has a place to hold; for a local env the lease is a
no-op. Changes coordinator state: the place is marked acquired by `host/user` until released
(acquired places never expire, so a lease that is not released blocks everyone else).

Why labgrid's ClientSession in-process, not `labgrid-client` subprocesses: the coordinator's
answers arrive as data (who holds the place, which resources it exports) instead of English text
on stderr that changes between releases; the identity is per lease instead of per process
(LG_USERNAME); and a call takes ~10 ms instead of ~0.5 s of interpreter and gRPC start-up.
The price is an API labgrid does not document; labgrid is pinned to 26.x and
tests/test_labgrid.py drives it against a real coordinator and exporter.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import os
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

from labwarden.lab.labgrid_backend import LabgridConfig, LabgridError, PlaceBusy, load_env, resolve_target
from labwarden.lab.target import SshTarget

T = TypeVar("T")

START_TIMEOUT_S = 10.0
"""How long to wait for the coordinator to answer a new session."""


@functools.cache
def _session_class() -> type:
    # imported late: labgrid.remote.client pulls in gRPC (~0.4 s) and replaces sys.excepthook
    import attr
    from labgrid.remote.client import ClientSession

    @attr.s(eq=False)
    class LeaseSession(ClientSession):
        """A ClientSession whose identity is the lease's, not the process's LG_USERNAME."""

        lease_user: str = attr.ib(default="", kw_only=True)
        lease_host: str = attr.ib(default="", kw_only=True)

        def getuser(self) -> str:
            return self.lease_user

        def gethostname(self) -> str:
            return self.lease_host

    return LeaseSession


class PlaceLease:
    """The place of `cfg.target`'s RemotePlace, held from `acquire()` to `release()` (or the
    `async with` block). All labgrid calls run in one thread of this lease's own: labgrid runs its
    own event loop, which cannot run inside ours."""

    def __init__(self, cfg: LabgridConfig, *, user: str | None = None, host: str | None = None):
        self.cfg = cfg
        env = load_env(cfg)
        self.place: str | None = env.remote_place
        self.coordinator = env.coordinator(cfg)
        self.user = user or os.environ.get("LG_USERNAME") or getpass.getuser()
        self.host = host or os.environ.get("LG_HOSTNAME") or socket.gethostname()
        self.held = False
        self.exported: dict[str, tuple[str, dict[str, Any]]] = {}
        """name -> (resource class, arguments) of what the place acquired, as of `acquire()`."""
        self._executor: ThreadPoolExecutor | None = None

    @property
    def holder(self) -> str:
        """How the coordinator names this lease's owner."""
        return f"{self.host}/{self.user}"

    def target(self, key_fallback: str | None = None) -> SshTarget:
        return resolve_target(self.cfg, key_fallback, lease=self)

    async def __aenter__(self) -> PlaceLease:
        return await self.acquire()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.release()

    async def acquire(self) -> PlaceLease:
        """Acquire the place; PlaceBusy names the holder if someone else has it. Idempotent."""
        if self.place is None or self.held:
            return self
        try:
            await self.run_with_session(self._acquire)
        except BaseException:
            await self.release()  # held if it failed (or was cancelled) after the coordinator said yes
            raise
        return self

    async def release(self) -> None:
        """Release the place if this lease holds it (never someone else's). Idempotent."""
        if not self.held:
            self._shutdown()
            return
        try:
            await self.run_with_session(self._release)
        finally:
            self._shutdown()

    async def run_with_session(self, fn: Callable[[Any], T]) -> T:
        """Run `fn(session)` in this lease's labgrid thread with a fresh coordinator session.

        A session per call, not one per lease: labgrid's gRPC stream only makes progress while its
        loop runs, and between calls nothing would run it; an acquired place needs no connection."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"labgrid-{self.cfg.target}")
        future = self._executor.submit(self._in_session, fn)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # a thread cannot be cancelled: let it finish so that `held` tells the truth
            with contextlib.suppress(BaseException):
                await asyncio.wrap_future(future)
            raise

    def _shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)  # idle by now: the thread exits at once
            self._executor = None

    # --- in the labgrid thread ---

    def _in_session(self, fn: Callable[[Any], T]) -> T:
        from labgrid.remote.client import ServerError
        from labgrid.util.proxy import proxymanager

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # grpc.aio binds its channel to the thread's current loop
        address = proxymanager.get_grpc_address(self.coordinator, default_port=20408)
        session = _session_class()(address, loop, lease_user=self.user, lease_host=self.host)
        try:
            try:
                loop.run_until_complete(asyncio.wait_for(session.start(), START_TIMEOUT_S))
            except (ServerError, TimeoutError) as exc:
                raise LabgridError(
                    f"cannot reach the labgrid coordinator at {self.coordinator}",
                    "start it (`labgrid-coordinator -l HOST:PORT`) or point `coordinator:` in the profile "
                    "(or LG_COORDINATOR) at the running one") from exc
            return fn(session)
        finally:
            loop.run_until_complete(session.stop())
            loop.run_until_complete(session.close())
            loop.close()
            asyncio.set_event_loop(None)

    def _place(self, session: Any) -> Any:
        place = session.places.get(self.place)
        if place is None:
            raise LabgridError(
                f"place {self.place} (targets.{self.cfg.target}.resources.RemotePlace in {self.cfg.env}) "
                f"does not exist on the coordinator at {self.coordinator}",
                f"`labgrid-client -x {self.coordinator} -p {self.place} create`, "
                "then `add-match` its resources")
        return place

    def _acquire(self, session: Any) -> None:
        import grpc
        from labgrid.remote.client import UserError
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        place = self._place(session)
        if place.acquired:
            raise PlaceBusy(place.name, place.acquired, ours=place.acquired == self.holder)
        try:
            session.check_matches(place)
        except UserError as exc:
            raise LabgridError(f"place {place.name}: {' '.join(map(str, exc.args))}",
                               "start the exporter that provides it, or fix the place's matches "
                               f"(`labgrid-client -p {place.name} show`)") from exc
        loop = session.loop
        try:
            loop.run_until_complete(session.stub.AcquirePlace(pb2.AcquirePlaceRequest(placename=place.name)))
        except grpc.aio.AioRpcError as exc:
            # the coordinator decides atomically: someone may have won the race since our check
            loop.run_until_complete(session.sync_with_coordinator())
            place = self._place(session)
            if place.acquired and place.acquired != self.holder:
                raise PlaceBusy(place.name, place.acquired) from exc
            raise LabgridError(f"coordinator refused to acquire place {place.name}: {exc.details()}",
                               f"check `labgrid-client -p {place.name} show` and the exporter") from exc
        loop.run_until_complete(session.sync_with_coordinator())
        self.held = True  # from here on, release() must run even if the snapshot below fails
        place = self._place(session)
        entries = session.get_target_resources(place)
        self.exported = {name: (entry.cls, entry.args) for (name, _cls), entry in entries.items()}
        if any(entry.extra.get("proxy_required") for entry in entries.values()):
            raise LabgridError(f"place {place.name} exports a resource only reachable through its exporter "
                               "host (an address with %interface)", "export an address reachable from here")

    def _release(self, session: Any) -> None:
        import grpc
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        # fromuser: the coordinator releases only if we still hold it; someone who kicked us keeps it
        request = pb2.ReleasePlaceRequest(placename=self.place, fromuser=self.holder)
        try:
            session.loop.run_until_complete(session.stub.ReleasePlace(request))
        except grpc.aio.AioRpcError as exc:
            raise LabgridError(f"coordinator refused to release place {self.place}: {exc.details()}",
                               f"`LG_USERNAME={self.user} labgrid-client -p {self.place} release`") from exc
        self.held = False
        self.exported = {}
