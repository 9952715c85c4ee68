"""labgrid as a DUT backend: find the DUT's SSH endpoint, hold its place, drive its Strategy.

Finding the endpoint (`resolve_endpoint`, reads the env YAML, changes nothing): a local env names
it itself (`NetworkService` + `SSHDriver`); an env with a `RemotePlace` gets it from the
coordinator once the place is acquired. Either way the result is an `SshEndpoint`.

Holding a place for a session (`PlaceLease`): acquire the RemotePlace's place (or the place a
fleet's lease names: lab/fleet.py) through the coordinator, release it at the end; for a local
env the lease is a no-op. Changes coordinator
state: the place is marked acquired by `host/user` until released (acquired places never expire,
so a lease that is not released blocks everyone else).

Driving a Strategy (`transition`): activate the target's Strategy and move it to a state; it may
power-cycle or flash the board.

labgrid runs its own event loop, which cannot run inside ours: every labgrid call runs in a
thread of its own (`_labgrid_thread`), the lease's for a RemotePlace. labgrid is imported inside
the functions that use it: any labgrid import costs ~0.2 s, and labgrid.remote.client also pulls
in gRPC and replaces sys.excepthook.

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
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, Field, ValidationError, model_validator

from labwarden.core.devtext import quote
from labwarden.core.errors import LabError
from labwarden.lab.dut.endpoint import SshEndpoint

if TYPE_CHECKING:
    from labgrid.config import Config

T = TypeVar("T")

DEFAULT_COORDINATOR = "127.0.0.1:20408"
"""labgrid's own default when neither the profile, the env YAML nor LG_COORDINATOR name one."""

START_TIMEOUT_S = 10.0
"""How long to wait for the coordinator to answer a new session."""

# labgrid's RemotePlaceManager is a process-wide singleton holding one session: a Target with a
# RemotePlace must be built by one thread at a time, with that thread's session installed.
_REMOTE_TARGET_LOCK = threading.Lock()


def _labgrid_thread(cfg: LabgridConfig) -> ThreadPoolExecutor:
    """A one-thread executor for labgrid calls about `cfg.target`."""
    return ThreadPoolExecutor(1, thread_name_prefix=f"labgrid-{cfg.target}")


# --- configuration and errors ---------------------------------------------------------------------

class LabgridConfig(BaseModel, extra="forbid"):
    """The `labgrid` section of a lab profile."""

    env: str = Field(description="path of the labgrid env YAML")
    target: str = Field("main", description="target (role) in the env YAML")
    coordinator: str | None = Field(
        None, description="coordinator HOST:PORT; else the env's options.coordinator_address, "
        "LG_COORDINATOR, or labgrid's default 127.0.0.1:20408")
    host_key: str | None = Field(
        None, description="the DUT's public host key ('ssh-ed25519 AAAA...') or a path to a .pub file: "
        "NetworkService carries no host key, so it is pinned here")
    strategy_state: str | None = Field(
        None, description="Strategy state to transition to for flashing (flash by labgrid strategy)")
    places: list[str] | None = Field(
        None, description="a fleet: the names of its places (the env YAML's RemotePlace name is then "
        "a template, each lease names its place)")
    place_match: str | None = Field(
        None, description="a fleet: an fnmatch pattern over the coordinator's place names (e.g. 'vlab-*')")
    place_tags: dict[str, str] | None = Field(
        None, description="a fleet: the places whose coordinator tags include all of these")
    place_profiles: dict[str, str] | None = Field(
        None, description="place -> that place's own lab profile, for fleets whose DUTs differ in "
        "their paths (a vlab's DUT paths are host paths, one state dir per DUT)")

    @model_validator(mode="after")
    def _one_selector(self) -> LabgridConfig:
        fleet_selector(self.places, self.place_match, self.place_tags)
        return self

    @property
    def is_fleet(self) -> bool:
        return fleet_selector(self.places, self.place_match, self.place_tags) is not None


def fleet_selector(places: list[str] | None, place_match: str | None,
                   place_tags: dict[str, str] | None) -> str | None:
    """Which of `places`, `place_match`, `place_tags` selects a fleet (None: a single place);
    ValueError names the fields if more than one is set or one is empty."""
    given = [name for name, value in (("places", places), ("place_match", place_match),
                                      ("place_tags", place_tags)) if value is not None]
    if len(given) > 1:
        raise ValueError(f"[dut.labgrid] sets {' and '.join(given)}: a fleet is selected by one of "
                         "places, place_match, place_tags; keep one")
    if given and not (places or place_match or place_tags):
        raise ValueError(f"[dut.labgrid] {given[0]} is empty: name at least one place, or remove it "
                         "for a single RemotePlace")
    return given[0] if given else None


class LabgridError(LabError):
    """A labgrid failure (env YAML, coordinator, place) with its remedy."""

    kind = "device"


class PlaceBusy(LabgridError):
    """The place is acquired by someone else (`holder` is 'host/user' as the coordinator reports it)."""

    def __init__(self, place: str, holder: str, *, ours: bool = False, reservation: str | None = None):
        self.place = place
        self.holder = holder
        host, _, user = holder.partition("/")
        if reservation is not None:
            super().__init__(
                f"place {place} is reserved for {quote(holder)} (user {quote(user)} on host {quote(host)}, "
                f"reservation {reservation}): the coordinator lets only them acquire it",
                f"ask {user} to cancel it (`labgrid-client cancel-reservation {reservation}`) or use "
                "the place, or wait until their reservation ends and retry")
        elif ours:
            super().__init__(
                f"place {place} is already acquired by {quote(holder)}, which is this identity: a session "
                "that never released it (a crash?) or another labwarden running as the same user",
                f"if no session uses it, run `LG_USERNAME={user} labgrid-client -p {place} release`")
        else:
            super().__init__(
                f"place {place} is acquired by {quote(holder)} (user {quote(user)} on host {quote(host)})",
                f"ask {user} to run `labgrid-client -p {place} release` on {host}, or wait until the "
                "place is released and retry")


# --- the env YAML ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class EnvTarget:
    """One target of an env YAML, parsed but not instantiated (instantiating a RemotePlace would
    open a process-global coordinator session; see PlaceLease)."""

    path: str
    role: str
    config: Config
    resources: dict[str, dict[str | None, dict[str, Any]]] = field(repr=False)
    drivers: dict[str, dict[str | None, tuple[dict[str, Any], dict[str, Any]]]] = field(repr=False)

    @property
    def remote_place(self) -> str | None:
        places = self.resources.get("RemotePlace", {})
        if len(places) > 1:
            raise LabgridError(f"{self.path}: targets.{self.role}.resources has {len(places)} RemotePlaces",
                               "keep one RemotePlace per target (one target per DUT)")
        # labgrid uses the resource's `name` as the place name
        return next(iter(places), None) or None

    def coordinator(self, cfg: LabgridConfig) -> str:
        return (cfg.coordinator or self.config.get_option("coordinator_address", "")
                or os.environ.get("LG_COORDINATOR") or DEFAULT_COORDINATOR)


def load_env(cfg: LabgridConfig) -> EnvTarget:
    """Parse the env YAML with labgrid's own loader (LG_* substitution, paths relative to the file)."""
    from labgrid.config import Config
    from labgrid.exceptions import InvalidConfigError, NoConfigFoundError
    from labgrid.factory import target_factory

    try:
        config = Config(cfg.env)
        targets = config.get_targets()
        if not isinstance(targets, dict):
            raise InvalidConfigError(f"'targets' in {cfg.env} must be a mapping")
        role_config = targets.get(cfg.target)
        if not isinstance(role_config, dict):
            raise LabgridError(
                f"{cfg.env}: no target '{cfg.target}' under `targets` "
                f"(found: {', '.join(targets) or 'none'})",
                "set `target:` in the profile's labgrid section to one of those, or add the target")
        raw_resources, raw_drivers = target_factory.normalize_config(role_config)
    except (NoConfigFoundError, InvalidConfigError, AttributeError, TypeError) as exc:
        msg = getattr(exc, "msg", None) or str(exc)
        raise LabgridError(f"labgrid env {cfg.env}: {msg}",
                           "fix the env YAML (see labgrid's 'Environment Configuration' docs)") from exc
    resources = {cls: {name: args[0] for name, args in named.items()} for cls, named in raw_resources.items()}
    return EnvTarget(cfg.env, cfg.target, config, resources, raw_drivers)


# --- finding the SSH endpoint ---------------------------------------------------------------------

def resolve_endpoint(cfg: LabgridConfig, key_fallback: str | None = None, *,
                     lease: PlaceLease | None = None) -> SshEndpoint:
    """The SSH endpoint of `cfg.target`: address, port, username from its NetworkService (for a
    RemotePlace: the one exported for the place `lease` holds), the key from SSHDriver `keyfile`."""
    env = load_env(cfg)
    base = f"{env.path}: targets.{env.role}"
    ssh_drivers = env.drivers.get("SSHDriver", {})
    ssh_args, bindings = (_pick(ssh_drivers, None, "SSHDriver", f"{base}.drivers")
                          if ssh_drivers else ({}, {}))
    wanted = bindings.get("networkservice") if isinstance(bindings, dict) else None
    place = env.remote_place
    if place is not None:
        # a fleet's RemotePlace name is a template: the lease names the place
        if lease is None or not lease.held or (lease.place != place and not cfg.is_fleet
                                               and lease.cfg is not cfg):
            raise LabgridError(
                f"{base}.resources.RemotePlace '{place}': the NetworkService comes from the coordinator "
                "and is known only while the place is acquired",
                "resolve inside `async with PlaceLease(cfg) as lease:` with lease=lease "
                "(or lease.endpoint())")
        place = lease.place
        exported: dict[str | None, dict[str, Any]] = {
            name: args for name, (cls, args) in lease.exported.items() if cls == "NetworkService"}
        ns_key = f"{base}.resources.RemotePlace '{place}' (its exported NetworkService)"
        if not exported:
            raise LabgridError(
                f"{ns_key}: place {place} holds no NetworkService (acquired: {sorted(lease.exported)})",
                "export a NetworkService and "
                f"`labgrid-client -p {place} add-match EXPORTER/GROUP/NetworkService`")
        ns = _pick(exported, wanted, "NetworkService", ns_key)
    else:
        ns_key = f"{base}.resources.NetworkService"
        if "NetworkService" not in env.resources:
            raise LabgridError(
                f"{ns_key} is missing: the env names no SSH endpoint",
                f"add `NetworkService: {{address: ..., port: 22, username: root}}` under {base}.resources "
                "(or a RemotePlace whose place exports one)")
        ns = _pick(env.resources["NetworkService"], wanted, "NetworkService", f"{base}.resources")
    address = ns.get("address")
    user = ssh_args.get("username") or ns.get("username")
    if not address:
        raise LabgridError(f"{ns_key}.address is missing", "set the DUT's address (e.g. 192.168.1.1)")
    if not user:
        raise LabgridError(f"{ns_key}.username is missing", "set `username: root` (or SSHDriver.username)")
    key = _keyfile(env, ssh_args, key_fallback, f"{base}.drivers.SSHDriver.keyfile")
    try:
        return SshEndpoint(host=str(address).split("%", 1)[0], port=ns.get("port", 22), user=user, key=key,
                           host_key=_host_key(cfg.host_key))
    except ValidationError as exc:
        raise LabgridError(f"{ns_key}: {exc.errors()[0]['msg']} ({exc.errors()[0]['loc']})",
                           "fix the NetworkService fields (address: str, port: 1-65535)") from exc


def _pick(named: dict[str | None, Any], wanted: str | None, what: str, key: str) -> Any:
    """The one entry of `named`, or the one `wanted` names; the error names the YAML key."""
    if wanted is not None:
        if wanted not in named:
            raise LabgridError(f"{key}: no {what} named '{wanted}' (found: {sorted(map(str, named))})",
                               f"name an existing {what} in the binding, or rename the resource")
        return named[wanted]
    if len(named) > 1:
        raise LabgridError(f"{key}: {len(named)} {what} resources ({sorted(map(str, named))}), which one?",
                           f"bind SSHDriver to one: `bindings: {{networkservice: NAME}}` under {key}")
    return next(iter(named.values()))


def _keyfile(env: EnvTarget, ssh_args: dict[str, Any], fallback: str | None, key: str) -> str:
    if ssh_args.get("keyfile"):
        # labgrid resolves a relative keyfile against the env file's directory; so do we
        return str(env.config.resolve_path(ssh_args["keyfile"]))
    if fallback:
        return fallback
    raise LabgridError(f"{key} is missing: no private key to log in with",
                       f"set `keyfile:` on the SSHDriver in {env.path}, or give the profile a default key")


def _host_key(value: str | None) -> str | None:
    if value is None or value.startswith(("ssh-", "ecdsa-", "sk-")):
        return value
    path = Path(value).expanduser()
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise LabgridError(f"labgrid.host_key: cannot read {path}: {exc.strerror}",
                           "give the key itself ('ssh-ed25519 AAAA...') or an existing .pub file") from exc


# --- holding a place for a session ----------------------------------------------------------------

_CHANNEL_OPTIONS = [
    # labgrid's ClientSession's own (client.py): keepalive pings, ping_timeout set to match
    ("grpc.keepalive_time_ms", 7500),
    ("grpc.keepalive_timeout_ms", 10000),
    ("grpc.http2.ping_timeout_ms", 10000),
    ("grpc.http2.max_pings_without_data", 0),
]


@functools.cache
def _session_class() -> type:
    # imported late (see the module docstring): pulls in gRPC, replaces sys.excepthook
    import attr
    from labgrid.remote.client import ClientSession

    @attr.s(eq=False)
    class LeaseSession(ClientSession):
        """A ClientSession whose identity is the lease's, not the process's LG_USERNAME."""

        lease_user: str = attr.ib(default="", kw_only=True)
        lease_host: str = attr.ib(default="", kw_only=True)

        def __attrs_post_init__(self) -> None:
            super().__attrs_post_init__()
            # gRPC shares one TCP connection among a process's channels to one address, and the
            # coordinator tells clients apart by that connection (an assertion kills the second
            # session's stream): concurrent sessions (a fleet's leases) need connections of their own
            import grpc
            from labgrid.remote.generated import labgrid_coordinator_pb2_grpc

            shared: Any = self.channel  # type: ignore[has-type]  # attrs-made in labgrid, untyped
            self.channel = grpc.aio.insecure_channel(target=self.address, options=[
                *_CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)])
            self.stub = labgrid_coordinator_pb2_grpc.CoordinatorStub(self.channel)
            self.loop.run_until_complete(shared.close())  # never used: no connection to close

        def getuser(self) -> str:
            return self.lease_user

        def gethostname(self) -> str:
            return self.lease_host

    return LeaseSession


def identity(user: str | None, host: str | None) -> tuple[str, str]:
    """(user, host) as the coordinator will know them: given, else LG_USERNAME/LG_HOSTNAME, else
    this process's user and host name (what labgrid-client uses)."""
    return (user or os.environ.get("LG_USERNAME") or getpass.getuser(),
            host or os.environ.get("LG_HOSTNAME") or socket.gethostname())


def in_session(coordinator: str, user: str, host: str, fn: Callable[[Any], T]) -> T:
    """Run `fn(session)` with a fresh coordinator session as `host/user`, in the calling thread
    (a labgrid thread: the session runs its own event loop)."""
    from labgrid.remote.client import ServerError
    from labgrid.util.proxy import proxymanager

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # grpc.aio binds its channel to the thread's current loop
    address = proxymanager.get_grpc_address(coordinator, default_port=20408)
    session = _session_class()(address, loop, lease_user=user, lease_host=host)
    try:
        try:
            loop.run_until_complete(asyncio.wait_for(session.start(), START_TIMEOUT_S))
        except (ServerError, TimeoutError) as exc:
            raise LabgridError(
                f"cannot reach the labgrid coordinator at {coordinator}",
                "start it (`labgrid-coordinator -l HOST:PORT`) or point `coordinator:` in the profile's "
                "[dut.labgrid] (or LG_COORDINATOR) at the running one") from exc
        return fn(session)
    finally:
        loop.run_until_complete(session.stop())
        loop.run_until_complete(session.close())
        # let gRPC deliver the closed stream's last events: on a closed loop it logs "Event loop is
        # closed" errors (seen on 2 of 30 sessions without this, on 0 of 60 with it)
        loop.run_until_complete(asyncio.sleep(0.01))
        loop.close()
        asyncio.set_event_loop(None)


KEEPALIVE_S = 15.0
"""How often a held lease polls its reservation: the coordinator expires a reservation not polled
for 60 s (an acquired one it keeps itself; the poll also notices a place taken from us)."""


class PlaceLease:
    """The place of `cfg.target`'s RemotePlace (or `place`, for a fleet), held from `acquire()` to
    `release()` (or the `async with` block). All labgrid calls run in one thread of this lease's
    own: labgrid runs its own event loop, which cannot run inside ours.

    `reservation`: the token of the coordinator reservation the place was allocated through
    (Fleet.lease); polled while held (`keep_alive`) and cancelled at release."""

    def __init__(self, cfg: LabgridConfig, *, place: str | None = None, user: str | None = None,
                 host: str | None = None, reservation: str | None = None):
        self.cfg = cfg
        if not cfg.env and place is not None and cfg.coordinator:  # named outright: `named`
            self.place: str | None = place
            self.coordinator = cfg.coordinator
        else:
            env = load_env(cfg)
            if place is not None and env.remote_place is None:
                raise LabgridError(f"{cfg.env}: targets.{cfg.target} has no RemotePlace, so no place "
                                   f"'{place}'",
                                   "add `RemotePlace: {name: ...}` to the target's resources (for a fleet "
                                   "its name is a template: each lease names its place)")
            self.place = place or env.remote_place
            self.coordinator = env.coordinator(cfg)
        self.user, self.host = identity(user, host)
        self._holding = asyncio.Lock()
        self.reservation = reservation
        self.held = False
        self.lost: str | None = None
        """Why the place is no longer ours although we did not release it (seen by keep_alive)."""
        self.exported: dict[str, tuple[str, dict[str, Any]]] = {}
        """name -> (resource class, arguments) of what the place acquired, as of `acquire()`."""
        self._executor: ThreadPoolExecutor | None = None
        self._keepalive: asyncio.Task[None] | None = None

    @classmethod
    def named(cls, place: str, coordinator: str, *, user: str | None = None,
              host: str | None = None) -> PlaceLease:
        """A lease of `place` at `coordinator`, named outright with no env YAML (a fleet place's
        own profile, [dut.place]): it holds the place; the profile itself says how the DUT is
        reached, so `endpoint()` is not for it."""
        return cls(LabgridConfig(env="", target=place, coordinator=coordinator), place=place,
                   user=user, host=host)

    @property
    def holder(self) -> str:
        """How the coordinator names this lease's owner."""
        return f"{self.host}/{self.user}"

    async def hold(self) -> PlaceLease:
        """Make sure this lease holds its place at the coordinator now: acquire it if not held
        (PlaceBusy names the holder if someone else has it), else confirm at the coordinator
        that it is still ours -- a place taken from us (`release --kick`, then acquired by
        another) raises PlaceBusy naming the new holder, one released from under us is acquired
        again. What the guard does before every call that touches a place's DUT. Concurrent
        calls (a server's client sessions) take turns."""
        async with self._holding:
            if not self.held:
                return await self.acquire()
            await self.run_with_session(self._confirm)
            return self

    def endpoint(self, key_fallback: str | None = None) -> SshEndpoint:
        """The SSH endpoint of the DUT this lease's place exports (resolve_endpoint)."""
        return resolve_endpoint(self.cfg, key_fallback, lease=self)

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
        """Release the place if this lease holds it (never someone else's) and cancel its
        reservation. Idempotent."""
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(BaseException):
                await self._keepalive
            self._keepalive = None
        if not self.held and self.reservation is None:
            self._shutdown()
            return
        try:
            await self.run_with_session(self._release)
        finally:
            self._shutdown()

    def keep_alive(self, interval_s: float = KEEPALIVE_S) -> None:
        """Poll the reservation every `interval_s` while held (in the running loop) and set `lost`
        if the place is no longer ours; stopped by release()."""
        if self._keepalive is None and self.held:
            self._keepalive = asyncio.get_running_loop().create_task(
                self._keep_alive(interval_s), name=f"lease-keepalive-{self.place}")

    async def _keep_alive(self, interval_s: float) -> None:
        while self.held and self.lost is None:
            await asyncio.sleep(interval_s)
            with contextlib.suppress(LabgridError):  # the coordinator away for a while: try again
                self.lost = await self.run_with_session(self._check)

    async def run_with_session(self, fn: Callable[[Any], T]) -> T:
        """Run `fn(session)` in this lease's labgrid thread with a fresh coordinator session.

        A session per call, not one per lease: labgrid's gRPC stream only makes progress while its
        loop runs, and between calls nothing would run it; an acquired place needs no connection."""
        if self._executor is None:
            self._executor = _labgrid_thread(self.cfg)
        future = self._executor.submit(in_session, self.coordinator, self.user, self.host, fn)
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

    def _place(self, session: Any) -> Any:
        place = session.places.get(self.place)
        if place is None:
            where = ("a place of the fleet in [dut.labgrid] of the profile" if self.cfg.is_fleet
                     else "[dut.place] name in the profile" if not self.cfg.env
                     else f"targets.{self.cfg.target}.resources.RemotePlace in {self.cfg.env}")
            raise LabgridError(
                f"place {self.place} ({where}) does not exist on the coordinator at {self.coordinator}",
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
        self._not_reserved_for_another(session, place)
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
            self._not_reserved_for_another(session, place)
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

    def _not_reserved_for_another(self, session: Any, place: Any) -> None:
        """PlaceBusy naming the owner when the place is allocated to someone else's reservation
        (the coordinator refuses anyone else; read, not polled: a poll would keep it alive)."""
        token = place.reservation
        if not token or token == self.reservation:
            return
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        found = session.loop.run_until_complete(session.stub.GetReservations(pb2.GetReservationsRequest()))
        owner = next((r.owner for r in found.reservations if r.token == token), None)
        if owner is not None and owner != self.holder:
            raise PlaceBusy(place.name, owner, reservation=token)

    def _confirm(self, session: Any) -> None:
        """Still ours at the coordinator (hold)? Else PlaceBusy naming the holder, or -- released
        from under us, free now -- acquired again."""
        place = self._place(session)
        if place.acquired == self.holder:
            return
        self.held = False  # not ours any more: release() must not touch it
        self.exported = {}
        if place.acquired:
            raise PlaceBusy(place.name, place.acquired)
        self._acquire(session)

    def _release(self, session: Any) -> None:
        import grpc
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        if self.reservation is not None:
            # cancelled before the release: see cancel_reservation
            cancel_reservation(session, self.reservation)
            self.reservation = None
        if self.held:
            # fromuser: the coordinator releases only if we still hold it; someone who kicked us keeps it
            request = pb2.ReleasePlaceRequest(placename=self.place, fromuser=self.holder)
            try:
                session.loop.run_until_complete(session.stub.ReleasePlace(request))
            except grpc.aio.AioRpcError as exc:
                raise LabgridError(
                    f"coordinator refused to release place {self.place}: {exc.details()}",
                    f"`LG_USERNAME={self.user} labgrid-client -p {self.place} release`") from exc
            self.held = False
            self.exported = {}

    def _check(self, session: Any) -> str | None:
        """Refresh the reservation; why the place is no longer ours, or None."""
        if self.reservation is not None and poll_reservation(session, self.reservation) is None:
            return f"reservation {self.reservation} of place {self.place} is gone from the coordinator"
        place = session.places.get(self.place)
        if place is None:
            return f"place {self.place} was deleted from the coordinator"
        if place.acquired != self.holder:
            return f"place {self.place} is now acquired by {quote(str(place.acquired))}, not this lease"
        return None


def poll_reservation(session: Any, token: str) -> Any | None:
    """The reservation `token` (labgrid's Reservation), refreshed by the poll; None if gone."""
    import grpc
    from labgrid.remote.common import Reservation
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    try:
        response = session.loop.run_until_complete(
            session.stub.PollReservation(pb2.PollReservationRequest(token=token)))
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:  # "Reservation ... does not exist"
            return None
        raise LabgridError(f"coordinator failed to poll reservation {token}: {exc.details()}",
                           "check the coordinator's log") from exc
    return Reservation.from_pb2(response.reservation)


def cancel_reservation(session: Any, token: str) -> None:
    """Cancel the reservation `token`; one already gone is fine.

    labgrid 26's scheduler finds the free places before it clears a cancelled reservation's mark
    on its place, so the place goes to the next waiting reservation only at the coordinator's next
    scheduling run (every 15 s, or the next request that schedules). A held place's reservation is
    therefore cancelled before the place is released (the release schedules again, with the mark
    cleared), and after cancelling an allocated one we schedule at once (`reschedule`)."""
    import grpc
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    try:
        session.loop.run_until_complete(
            session.stub.CancelReservation(pb2.CancelReservationRequest(token=token)))
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
            raise LabgridError(f"coordinator refused to cancel reservation {token}: {exc.details()}",
                               f"`labgrid-client cancel-reservation {token}`") from exc


RESCHEDULE_TAG = "labwarden-reschedule"
"""The tag of `reschedule`'s reservation: no place carries it, so it is never allocated."""


def reschedule(session: Any) -> None:
    """Make the coordinator schedule its reservations now: create (and cancel) a reservation that
    matches no place (creating one is what runs the scheduler)."""
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    request = pb2.CreateReservationRequest(
        filters={"main": pb2.Reservation.Filter(filter={RESCHEDULE_TAG: "1"})}, prio=-1.0)
    response = session.loop.run_until_complete(session.stub.CreateReservation(request))
    cancel_reservation(session, response.reservation.token)


def _name_place(target: dict[str, Any], place: str) -> None:
    """Point the target's RemotePlace at `place` (a fleet's env names a template place)."""
    resources = target.get("resources") or {}
    entries = resources if isinstance(resources, list) else [resources]
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("RemotePlace"), dict):
            entry["RemotePlace"]["name"] = place


# --- driving a Strategy ---------------------------------------------------------------------------

def strategy_failure(exc: BaseException) -> str:
    """What made a Strategy's transition fail, as "Type: message". labgrid's `never_retry` raises
    "X is in broken state" from the exception that broke X: that one is named instead (a remote
    strategy's is the chain's next link, with the daemon's own reason in its message)."""
    while str(exc).endswith("is in broken state") and exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


async def transition(cfg: LabgridConfig, state: str, *, lease: PlaceLease | None = None,
                     images: dict[str, str] | None = None) -> None:
    """Activate the target's Strategy and `transition(state)` (e.g. flash), in a labgrid thread:
    the lease's thread for a RemotePlace (required then), else a thread of its own. `images`
    are set in the env's `images:` first (what the strategy's flasher installs)."""
    if lease is not None and lease.place is not None:
        place = lease.place
        await lease.run_with_session(lambda session: _transition_sync(cfg, state, session, images, place))
        return
    if load_env(cfg).remote_place is not None:
        raise LabgridError(f"{cfg.env}: target {cfg.target} uses a RemotePlace: a transition needs the place",
                           "call transition(cfg, state, lease=lease) inside `async with PlaceLease(cfg)`")
    with _labgrid_thread(cfg) as pool:
        await asyncio.wrap_future(pool.submit(_transition_sync, cfg, state, None, images))


def _transition_sync(cfg: LabgridConfig, state: str, session: Any | None,
                     images: dict[str, str] | None = None, place: str | None = None) -> None:
    from labgrid import Environment
    from labgrid.exceptions import NoDriverFoundError
    from labgrid.resource.remote import RemotePlaceManager

    env = Environment(config_file=cfg.env)
    if images:
        env.config.data.setdefault("images", {}).update(images)
    if place is not None:
        _name_place(env.config.data["targets"][cfg.target], place)
    with _REMOTE_TARGET_LOCK:
        manager = RemotePlaceManager.get()
        if session is not None:
            # what labgrid-client does before building a target: install our session (and identity)
            manager.session, manager.loop = session, session.loop
        try:
            target = env.get_target(cfg.target)
            if target is None:
                raise LabgridError(f"{cfg.env}: no target '{cfg.target}'", "set `target:` in the profile")
            try:
                try:
                    strategy = target.get_driver("Strategy")
                except NoDriverFoundError as exc:
                    raise LabgridError(f"{cfg.env}: targets.{cfg.target}.drivers has no Strategy",
                                       "add a Strategy driver, or flash another way") from exc
                strategy.transition(state)
            finally:
                target.cleanup()
        finally:
            if session is not None:
                # the session closes after this call: leave no stale session or resources behind
                manager.session = manager.loop = None
                manager.resources.clear()
                manager.unmanaged_resources.clear()
