"""Pin a local DUT's process tree to one CPU, so that DUTs of a fleet on one host do not measure
each other.

Why a cgroup v1 cpuset first, sched_setaffinity only as the fallback: a cpuset is enforced by the
kernel for every process in it and every process they fork (a DUT process that calls
sched_setaffinity or `taskset` cannot leave it), its member list (`tasks`) tells `down` whether
anything of the DUT is left, and removing it fails while anything is. Affinity is inherited too,
but any process may widen its own. Hosts without a writable cpuset v1 hierarchy (cgroup v2 only,
or a container) get the affinity, and the pin says which it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labwarden.core.errors import LabError

CPUSET = Path("/sys/fs/cgroup/cpuset")
DUT_NICE = -10
"""A pinned DUT's scheduling priority: a host process on its CPU (nice 0) gets about a tenth of
it while the DUT's processes want it (CFS weights 9548 against 1024)."""


class PinError(LabError):
    """The CPU pinning of a DUT failed, with its remedy."""


def host_cpus() -> list[int]:
    """The CPUs processes here may run on (the root cpuset's, else this process's affinity)."""
    effective = CPUSET / "cpuset.effective_cpus"
    if effective.exists():
        with contextlib.suppress(OSError, ValueError):
            return parse_cpus(effective.read_text())
    return sorted(os.sched_getaffinity(0))


def parse_cpus(text: str) -> list[int]:
    """'0-2,4' -> [0, 1, 2, 4]"""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


@dataclass(frozen=True)
class Pin:
    """One DUT's CPU: `cgroup` is its cpuset directory, or None when pinned by affinity."""

    cpu: int
    cgroup: Path | None

    @property
    def how(self) -> str:
        return f"cpuset {self.cgroup}" if self.cgroup else "sched_setaffinity (no writable cpuset v1)"

    def preexec(self) -> Callable[[], None]:
        """For Popen(preexec_fn=...): the child enters the pin before it execs, so everything it
        forks is pinned from its first instruction -- and runs at DUT_NICE: every CPU of the host
        holds a DUT then, so the host's own work (another place's builds, flashes, symbolization)
        runs on a DUT's CPU and must yield to it rather than land in its windows."""
        cgroup, cpu = self.cgroup, self.cpu

        def enter() -> None:
            if cgroup is not None:
                (cgroup / "tasks").write_text(f"{os.getpid()}\n")
            else:
                os.sched_setaffinity(0, {cpu})
            with contextlib.suppress(OSError):  # not root: the host's work competes as equal
                os.setpriority(os.PRIO_PROCESS, 0, DUT_NICE)
        return enter

    def tasks(self) -> list[int]:
        """The processes in the cpuset (empty for an affinity pin: nothing to ask)."""
        if self.cgroup is None:
            return []
        try:
            return [int(x) for x in (self.cgroup / "tasks").read_text().split()]
        except FileNotFoundError:
            return []


def pin_for(key: str, cpu: int) -> Pin:
    """A pin to `cpu` for the DUT `key` (its state dir): a cpuset of its own if the host has a
    writable cpuset v1 hierarchy, else an affinity."""
    if cpu not in host_cpus():
        raise PinError(f"CPU {cpu} is not one this host runs processes on ({host_cpus()})",
                       "pin to one of those CPUs")
    cgroup = CPUSET / f"labwarden-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    try:
        cgroup.mkdir(exist_ok=True)
        (cgroup / "cpuset.mems").write_text((CPUSET / "cpuset.mems").read_text())
        (cgroup / "cpuset.cpus").write_text(f"{cpu}\n")
        (cgroup / "notify_on_release").write_text("0\n")
    except OSError:
        with contextlib.suppress(OSError):
            cgroup.rmdir()
        return Pin(cpu, None)
    return Pin(cpu, cgroup)


def save(pin: Pin, path: Path) -> None:
    path.write_text(f"{pin.cpu} {pin.cgroup or '-'}\n")


def load(path: Path) -> Pin | None:
    try:
        cpu, cgroup = path.read_text().split()
    except (OSError, ValueError):
        return None
    return Pin(int(cpu), None if cgroup == "-" else Path(cgroup))


def unpin(pin: Pin) -> None:
    """Remove the pin's cpuset; PinError names what is still in it."""
    if pin.cgroup is None or not pin.cgroup.exists():
        return
    left = pin.tasks()
    if left:
        raise PinError(f"processes {left} still run in {pin.cgroup}",
                       f"stop them: kill {' '.join(map(str, left))}")
    pin.cgroup.rmdir()
