"""A fleet: several places of one kind on a labgrid coordinator, leased one at a time.

The profile's `[dut.labgrid]` selects the fleet (`places`, `place_match` or `place_tags`); the env
YAML's RemotePlace is then a template whose name each lease replaces with its place.

Why per-place reservations, not one reservation with a tag filter: labgrid's scheduler matches a
reservation's filter by exact tag values (`name` included), so it cannot express "any of these but
not the ones marked bad" (`exclude`) nor a name pattern. A lease instead files one reservation per
candidate place (filter `name=PLACE`) and takes the first the coordinator allocates, cancelling the
others. The coordinator hands each freed place to its oldest waiting reservation (by priority,
then age), so the client that has waited longest gets the next free place: waiting clients queue
fairly, whether they are fleets or `labgrid-client reserve --wait name=PLACE`. A place allocated
to a reservation can be acquired only by the reservation's owner (the coordinator refuses anyone
else), and a fleet acquires only places allocated to its own reservations: two fleets never share
a place even under one identity.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import threading
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from labwarden.lab.labgrid import (
    KEEPALIVE_S,
    LabgridConfig,
    LabgridError,
    PlaceBusy,
    PlaceLease,
    cancel_reservation,
    identity,
    in_session,
    load_env,
    poll_reservation,
    reschedule,
)

POLL_S = 0.5
"""How often a waiting lease polls its reservations (labgrid-client polls every 1 s; each poll
also refreshes the reservation, which expires after 60 s unpolled)."""


class PlaceHealth(BaseModel):
    """One place's health as the loop records it (good/unknown/bad, as LAVA keeps it)."""

    place: str
    state: Literal["good", "unknown", "bad"]
    reason: str | None = None
    since: datetime


class NoPlace(LabgridError):
    """No place of the fleet can be leased (none matches, all excluded, or none became free)."""


class Fleet:
    """The places `cfg` selects on its coordinator, leased through reservations as `host/user`."""

    def __init__(self, cfg: LabgridConfig, *, user: str | None = None, host: str | None = None) -> None:
        self.cfg = cfg
        self.coordinator = load_env(cfg).coordinator(cfg)
        self.user, self.host = identity(user, host)

    def is_fleet(self) -> bool:
        """Whether the profile selects several places (else: its env YAML's one RemotePlace)."""
        return self.cfg.is_fleet

    @property
    def holder(self) -> str:
        return f"{self.host}/{self.user}"

    async def places(self) -> list[str]:
        """The matching places the coordinator knows, sorted (one place: the env YAML's)."""
        names: list[str] = await self._run(self._matching)
        return names

    async def free_places(self) -> list[str]:
        """The matching places nobody has acquired now, sorted (a waiting reservation may still
        take one first)."""
        names: list[str] = await self._run(self._free)
        return names

    async def lease(self, *, exclude: Collection[str] = (), prefer: str | None = None,
                    timeout_s: float | None = None, prio: float = 0.0,
                    keepalive_s: float = KEEPALIVE_S) -> PlaceLease:
        """Wait for a free matching place not in `exclude` (`prefer` first if it is free too),
        acquire it and return the held lease, its reservation polled every `keepalive_s` until
        `release()`. Waiting reservations are served by `prio` (higher first), then age, as
        labgrid's scheduler orders them. NoPlace if none matches or none became free within
        `timeout_s`."""
        stop = threading.Event()
        pool = ThreadPoolExecutor(1, thread_name_prefix=f"labgrid-fleet-{self.cfg.target}")
        future = pool.submit(in_session, self.coordinator, self.user, self.host,
                             lambda session: self._reserve_and_acquire(
                                 session, set(exclude), prefer, timeout_s, prio, stop))
        try:
            lease = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            stop.set()  # the thread cancels its reservations (and releases a place it got) and ends
            with contextlib.suppress(BaseException):
                await asyncio.wrap_future(future)
            raise
        finally:
            pool.shutdown(wait=False)
        lease.keep_alive(keepalive_s)
        return lease

    async def _run(self, fn: Any) -> Any:
        with ThreadPoolExecutor(1, thread_name_prefix=f"labgrid-fleet-{self.cfg.target}") as pool:
            return await asyncio.wrap_future(
                pool.submit(in_session, self.coordinator, self.user, self.host, fn))

    # --- in the labgrid thread ---

    def _free(self, session: Any) -> list[str]:
        known: dict[str, Any] = session.places
        return [name for name in self._matching(session) if name in known and not known[name].acquired]

    def _matching(self, session: Any) -> list[str]:
        known: dict[str, Any] = session.places
        cfg = self.cfg
        if cfg.places is not None:
            missing = [p for p in cfg.places if p not in known]
            if missing:
                has = ", ".join(sorted(known)) or "none"
                raise NoPlace(f"[dut.labgrid] places names {', '.join(missing)}, which the coordinator at "
                              f"{self.coordinator} does not have (it has: {has})",
                              f"create them (`labgrid-client -x {self.coordinator} -p NAME create`, then "
                              "`add-match`), or fix `places`")
            return sorted(cfg.places)
        if cfg.place_match is not None:
            found = sorted(name for name in known if fnmatch.fnmatchcase(name, cfg.place_match))
            what = f"place_match {cfg.place_match!r}"
        elif cfg.place_tags is not None:
            tags = cfg.place_tags.items()
            found = sorted(name for name, place in known.items() if tags <= place.tags.items())
            what = f"place_tags {cfg.place_tags}"
        else:
            single = load_env(cfg).remote_place
            if single is None:
                raise NoPlace(f"{cfg.env}: targets.{cfg.target} has no RemotePlace and the profile selects "
                              "no fleet", "set [dut.labgrid] places or place_match, with a RemotePlace")
            return [single]
        if not found:
            raise NoPlace(f"[dut.labgrid] {what} matches none of the places on the coordinator at "
                          f"{self.coordinator} ({', '.join(sorted(known)) or 'none'})",
                          f"fix {what.split()[0]}, or create the places (`labgrid-client -p NAME create`)")
        return found

    def _reserve_and_acquire(self, session: Any, exclude: set[str], prefer: str | None,
                             timeout_s: float | None, prio: float, stop: threading.Event) -> PlaceLease:
        import grpc
        from labgrid.remote.common import ReservationState
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        matching = self._matching(session)
        candidates = [p for p in matching if p not in exclude]
        if not candidates:
            raise NoPlace(f"every place of the fleet is excluded ({', '.join(matching)})",
                          "bring a place back to health, or add places to the fleet")
        if prefer in candidates:
            candidates.remove(prefer)
            candidates.insert(0, prefer)
        loop = session.loop
        tokens: dict[str, str] = {}
        unusable: dict[str, str] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            for name in candidates:
                request = pb2.CreateReservationRequest(
                    filters={"main": pb2.Reservation.Filter(filter={"name": name})}, prio=prio)
                try:
                    response = loop.run_until_complete(session.stub.CreateReservation(request))
                except grpc.aio.AioRpcError as exc:
                    raise LabgridError(f"coordinator refused a reservation for place {name}: {exc.details()}",
                                       "check the coordinator's log") from exc
                tokens[name] = response.reservation.token
            while True:
                for name in candidates:
                    if name not in tokens:
                        continue
                    res = poll_reservation(session, tokens[name])
                    if res is None or res.state in (ReservationState.invalid, ReservationState.expired):
                        del tokens[name]  # the place was deleted (invalid) or we polled too late
                        continue
                    if res.state is not ReservationState.allocated:
                        continue
                    lease = PlaceLease(self.cfg, place=name, user=self.user, host=self.host,
                                       reservation=tokens[name])
                    try:
                        lease._acquire(session)
                    except PlaceBusy:
                        # acquired directly (no reservation) under our own identity before ours was
                        # allocated: leave it, keep waiting for the others
                        cancel_reservation(session, tokens.pop(name))
                        reschedule(session)
                        continue
                    except LabgridError as exc:
                        # this place cannot be used (its exporter gone, a resource only its exporter
                        # reaches): give it back and keep waiting for the others
                        unusable[name] = exc.problem
                        lease.reservation = tokens.pop(name)
                        lease._release(session)
                        reschedule(session)
                        continue
                    except BaseException:
                        if lease.held:
                            lease._release(session)
                        raise
                    del tokens[name]  # the lease owns it now
                    return lease
                if not tokens:
                    why = "; ".join(f"{name}: {problem}" for name, problem in unusable.items()) or \
                        "places deleted, or acquired without a reservation by this identity"
                    raise NoPlace(f"the reservations for {', '.join(candidates)} ended without a place "
                                  f"({why})",
                                  f"`labgrid-client -x {self.coordinator} places` shows who holds them; "
                                  "`-p PLACE show` what a place matches")
                if deadline is not None and time.monotonic() > deadline:
                    raise NoPlace(f"no place of the fleet became free in {timeout_s:g} s: "
                                  f"{self._holders(session, candidates)}",
                                  "wait, or ask the holders to release (`labgrid-client -p PLACE release`)")
                if stop.is_set():
                    raise LabgridError("lease cancelled while waiting for a place", "none needed")
                loop.run_until_complete(session.sync_with_coordinator())
                loop.run_until_complete(asyncio.sleep(POLL_S))
        finally:
            allocated = False
            for token in tokens.values():
                with contextlib.suppress(LabgridError):
                    res = poll_reservation(session, token)
                    allocated |= res is not None and res.state is ReservationState.allocated
                    cancel_reservation(session, token)
            if allocated:  # its place goes to the next waiter now, not in 15 s (cancel_reservation)
                with contextlib.suppress(Exception):
                    reschedule(session)

    def _holders(self, session: Any, names: list[str]) -> str:
        parts = []
        for name in names:
            place = session.places.get(name)
            holder = place.acquired if place is not None else None
            parts.append(f"{name} held by {holder}" if holder else f"{name} reserved for someone else")
        return "; ".join(parts)
