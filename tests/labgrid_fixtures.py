"""A real labgrid coordinator + exporter on loopback, exporting the vlab's SSH endpoint as a place.

Started as subprocesses in their own process groups and always stopped; afterwards the fixture
asserts that no process of those groups is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import attr
from labgrid.factory import target_factory
from labgrid.step import step
from labgrid.strategy import Strategy

from labwarden.lab.hub import free_port, port_open

BIN = Path(sys.executable).parent
EXPORTER = "vlab-exporter"
MATCH = f"{EXPORTER}/vlab/NetworkService"
"""exporter/group/class: what the place matches."""


@dataclass(frozen=True)
class LabgridLab:
    root: Path
    coordinator: str
    """127.0.0.1:PORT"""
    place: str

    def client(self, *args: str, user: str = "fixture",
               check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LG_USERNAME": user}
        env.pop("LG_ENV", None)
        return subprocess.run([str(BIN / "labgrid-client"), "-x", self.coordinator, *args], env=env,
                              capture_output=True, text=True, timeout=30, check=check)

    def acquired_by(self) -> str | None:
        """The place's holder as `labgrid-client show` prints it (None if free)."""
        out = self.client("-p", self.place, "show").stdout
        line = next(x for x in out.splitlines() if x.strip().startswith("acquired:"))
        value = line.split(":", 1)[1].strip()
        return None if value == "None" else value


def _wait_until(what: str, ready: object, procs: list[subprocess.Popen[bytes]], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"labgrid fixture: {what} not ready after {timeout} s")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@contextmanager
def running_labgrid(root: Path, ssh_port: int, place: str = "vlab") -> Iterator[LabgridLab]:
    """Coordinator + exporter (NetworkService 127.0.0.1:ssh_port, user root) + a place matching it."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    lab = LabgridLab(root, f"127.0.0.1:{port}", place)
    (root / "exporter.yaml").write_text(
        f"vlab:\n  NetworkService:\n    address: 127.0.0.1\n    port: {ssh_port}\n    username: root\n")
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(root / log, "wb") as out:
            # own process group: stopped as a whole, and checked as a whole afterwards
            proc = subprocess.Popen(argv, cwd=root, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        procs.append(proc)
        return proc

    try:
        # cwd=root: the coordinator keeps places.yaml/resources.yaml in its working directory
        start([str(BIN / "labgrid-coordinator"), "-l", lab.coordinator], "coordinator.log")
        _wait_until("coordinator", lambda: port_open(port), procs)
        start([str(BIN / "labgrid-exporter"), "-c", lab.coordinator, "-n", EXPORTER,
               "--hostname", "127.0.0.1", str(root / "exporter.yaml")], "exporter.log")
        _wait_until("exporter's NetworkService",
                    lambda: MATCH in lab.client("resources", check=False).stdout, procs)
        lab.client("-p", place, "create")
        lab.client("-p", place, "add-match", MATCH)
        yield lab
    finally:
        for proc in reversed(procs):
            _stop(proc)
        left = [p.args for p in procs if p.returncode is None or not _group_gone(p.pid)]
        assert not left, f"labgrid processes left running: {left}"


# Registered with labgrid on import: stands in for a flashing strategy in env YAMLs.
@target_factory.reg_driver
@attr.s(eq=False)
class MarkerStrategy(Strategy):
    """Writes 'STATE ADDRESS:PORT' to `marker` on each transition (what a flash would reach)."""

    bindings: ClassVar[dict[str, str]] = {"networkservice": "NetworkService"}
    marker = attr.ib(default="", validator=attr.validators.instance_of(str))

    @step(args=["status"])
    def transition(self, status: str, *, step: object) -> None:  # type: ignore[override]
        ns = self.networkservice
        Path(self.marker).write_text(f"{status} {ns.address}:{ns.port}")
