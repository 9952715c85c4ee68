"""A labgrid coordinator and exporter of our own on 127.0.0.1, with one place per local DUT.

What `vlab up --places N` and `qlab up --places N` stand a fleet on (a real lab brings its own
coordinator: see README "A fleet"). Both processes run detached in their own sessions with the
hub directory as their working directory (the coordinator keeps places.yaml and resources.yaml
there), so `down` finds them by pid file and, should a pid file be lost, by their cwd.
`down` removes the processes, the coordinator's state (places, reservations live only in it and
in places.yaml) and checks nothing is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.lab.host.pidfile import alive, read_pid, stop
from labwarden.lab.labgrid import in_session

EXPORTER = "labwarden"
"""The exporter's name: the place of DUT `g` matches `labwarden/g/NetworkService`."""
BIN = Path(sys.executable).parent
START_S = 20.0
PROCESSES = ("exporter", "coordinator")
"""Stop order: the exporter first, so the coordinator never sees its resources orphaned."""


class HubError(LabError):
    """A failure of the local coordinator or exporter, with its remedy."""


class HubPlace(BaseModel):
    """One DUT exported as a place: its SSH endpoint (a NetworkService) and the place's tags."""

    name: str
    address: str = "127.0.0.1"
    port: int
    username: str = "root"
    tags: dict[str, str] = Field(default_factory=dict)


class HubInfo(BaseModel):
    dir: str
    coordinator: str = Field(description="127.0.0.1:PORT")
    places: list[str]
    pids: dict[str, int]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _pidfile(dir: Path, name: str) -> Path:
    return dir / f"{name}.pid"


def _start(dir: Path, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    with open(dir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(argv, cwd=dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    _pidfile(dir, name).write_text(f"{proc.pid}\n")
    return proc


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_S
    while not ready():
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            raise HubError(f"{what} exited with {proc.returncode}: {' | '.join(tail)}", f"see {log}")
        if time.monotonic() > deadline:
            raise HubError(f"{what} not ready after {START_S:g} s", f"see {log}")
        time.sleep(0.05)


def up(dir: Path, places: list[HubPlace]) -> HubInfo:
    """Start a coordinator and an exporter in `dir` and create `places`; on failure nothing is left."""
    dir = dir.resolve()
    if any(alive(read_pid(_pidfile(dir, name))) for name in PROCESSES):
        raise HubError(f"a labgrid coordinator/exporter already runs from {dir}",
                       "bring the fleet down first (`labwarden vlab down` / `qlab down` with its --dir)")
    shutil.rmtree(dir, ignore_errors=True)  # stale places.yaml: the places are created afresh
    dir.mkdir(parents=True)
    (dir / "exporter.yaml").write_text(json.dumps({  # JSON is YAML
        p.name: {"NetworkService": {"address": p.address, "port": p.port, "username": p.username}}
        for p in places}, indent=1) + "\n")
    try:
        port = free_port()
        coordinator = f"127.0.0.1:{port}"
        # -l: labgrid's default binds every interface; a lab without authentication stays on loopback
        proc = _start(dir, "coordinator", [str(BIN / "labgrid-coordinator"), "-l", coordinator])
        _wait(f"labgrid-coordinator on {coordinator}", lambda: port_open(port), proc,
              dir / "coordinator.log")
        exporter = _start(dir, "exporter", [str(BIN / "labgrid-exporter"), "-c", coordinator, "-n", EXPORTER,
                                            "--hostname", "127.0.0.1", str(dir / "exporter.yaml")])
        wanted = {p.name for p in places}
        _wait("labgrid-exporter's resources", lambda: wanted <= _exported(coordinator), exporter,
              dir / "exporter.log")
        in_session(coordinator, "labwarden-hub", "127.0.0.1", lambda session: _create(session, places))
    except BaseException:
        down(dir)
        raise
    info = HubInfo(dir=str(dir), coordinator=coordinator, places=[p.name for p in places],
                   pids={name: read_pid(_pidfile(dir, name)) or 0 for name in PROCESSES})
    (dir / "hub.json").write_text(info.model_dump_json(indent=1) + "\n")
    return info


def _exported(coordinator: str) -> set[str]:
    """The groups the exporter `EXPORTER` has announced to the coordinator."""
    def groups(session: Any) -> set[str]:
        return set(session.resources.get(EXPORTER, {}))
    try:
        return in_session(coordinator, "labwarden-hub", "127.0.0.1", groups)
    except LabError:
        return set()


def _create(session: Any, places: list[HubPlace]) -> None:
    import grpc
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    loop, stub = session.loop, session.stub
    try:
        for p in places:
            loop.run_until_complete(stub.AddPlace(pb2.AddPlaceRequest(name=p.name)))
            loop.run_until_complete(stub.AddPlaceMatch(pb2.AddPlaceMatchRequest(
                placename=p.name, pattern=f"{EXPORTER}/{p.name}/NetworkService")))
            if p.tags:
                loop.run_until_complete(stub.SetPlaceTags(
                    pb2.SetPlaceTagsRequest(placename=p.name, tags=p.tags)))
    except grpc.aio.AioRpcError as exc:
        raise HubError(f"the coordinator refused to create the places: {exc.details()}",
                       "see coordinator.log in the hub directory") from exc


def running(dir: Path) -> bool:
    """Whether the coordinator and the exporter of the hub in `dir` both run."""
    return all(alive(read_pid(_pidfile(dir.resolve(), name))) for name in PROCESSES)


def leftovers(dir: Path) -> list[int]:
    """Live processes whose working directory is `dir` (the hub's, or what a lost pid file hid)."""
    dir = dir.resolve()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(os.readlink(f"/proc/{entry}/cwd")) == dir and alive(int(entry)):
                    found.append(int(entry))
    return sorted(found)


def down(dir: Path) -> list[int]:
    """Stop the exporter and the coordinator (their reservations die with it), delete `dir` (the
    places), and check no process is left. Returns the pids stopped."""
    dir = dir.resolve()
    stopped = []
    for name in PROCESSES:
        pid = read_pid(_pidfile(dir, name))
        if stop(pid, timeout=5):
            assert pid is not None
            stopped.append(pid)
    if dir.exists():
        for pid in leftovers(dir):
            if stop(pid, timeout=2):
                stopped.append(pid)
    left = leftovers(dir) if dir.exists() else []
    if left:
        raise HubError(f"labgrid processes still running from {dir}: {left}",
                       f"kill {' '.join(map(str, left))}")
    shutil.rmtree(dir, ignore_errors=True)
    return stopped
