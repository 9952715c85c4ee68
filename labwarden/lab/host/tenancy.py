"""Tenants on the host: each build and each vlab DUT service gets a uid and a cgroup of its own.

Why: two tenants under one uid share RLIMIT_NPROC (per uid, host-wide: one build's fork bomb
starved another's `make`) and may signal, ptrace and write each other's /proc/PID/mem. A uid of
its own per tenant puts each behind the kernel's own permission checks; a cgroup of its own bounds
the tenant as a whole (processes, memory -- a private tmpfs's pages included) and ends it as a
whole (`cgroup.kill`: every process it started, wherever it moved to in the process tree).

Uids are leased, not assigned: a lease is an exclusive `flock` on a file named after the uid, held
by the process that runs the tenant (the build's thread, the DUT's daemon), so the kernel frees it
when that process dies, however it dies. The uids need no /etc/passwd entry: nothing resolves them
by name.

This machine's cgroups are hybrid (cgroup v1 `pids` and `memory` hierarchies, and a cgroup2
hierarchy without controllers at /sys/fs/cgroup/unified, which still has `cgroup.kill`); a host
with one unified cgroup2 hierarchy has all three in one directory. Written here rather than taken
from a library: the few maintained cgroup libraries drive systemd or cgroup2 only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from labwarden.core.errors import LabError

CGROUP_ROOT = Path("/sys/fs/cgroup")
LEASES = Path("/run/labwarden/uids")
"""One lock file per leased uid (a tmpfs: nothing survives a reboot that a lease could keep)."""
TenantKind = Literal["build", "dut"]
UID_RANGES: dict[TenantKind, tuple[int, int]] = {"build": (1_100_000, 4096), "dut": (1_200_000, 4096)}
"""(first uid, how many) per kind: far above any uid a distribution hands out, and apart from each
other, so a build's uid is never a DUT's."""
KILL_WAIT_S = 10.0


class TenancyError(LabError):
    kind = "build"


def available() -> bool:
    """Tenants need root (to change uid and create cgroups) and a cgroup2 hierarchy (for kill)."""
    return os.geteuid() == 0 and _unified() is not None


@dataclass
class UidLease:
    """A uid held for one tenant while this object (and its lock fd) lives."""

    uid: int
    _fd: int = field(repr=False)

    @property
    def gid(self) -> int:
        return self.uid

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1

    def __enter__(self) -> UidLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lease_uid(kind: TenantKind) -> UidLease:
    """The first free uid of `kind`'s range, held until released (or this process dies)."""
    first, count = UID_RANGES[kind]
    LEASES.mkdir(parents=True, exist_ok=True, mode=0o700)
    for uid in range(first, first + count):
        fd = os.open(LEASES / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise TenancyError(f"all {count} {kind} uids from {first} are leased",
                       "too many builds or DUTs at once: wait for one to end")


def _own_path(controller: str) -> str:
    """This process's cgroup path in `controller`'s v1 hierarchy ("" for cgroup2): tenants are
    made below it, so whatever limits this process keeps limiting them."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _num, names, path = line.split(":", 2)
        if names.split(",") == [controller] or (controller == "" and names == ""):
            return path
    return "/"


def _unified() -> Path | None:
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return CGROUP_ROOT
    if (CGROUP_ROOT / "unified" / "cgroup.controllers").exists():
        return CGROUP_ROOT / "unified"
    return None


@dataclass
class Cgroup:
    """One tenant's cgroup: a directory per hierarchy it lives in (the first is the cgroup2 one)."""

    name: str
    dirs: list[Path]

    @property
    def unified(self) -> Path:
        return self.dirs[0]

    @classmethod
    def create(cls, name: str, *, pids_max: int | None = None,
               memory_bytes: int | None = None) -> Cgroup:
        """Create (or take back, emptied) the cgroup `name` below labwarden's, with its limits."""
        unified = _unified()
        if unified is None:
            raise TenancyError("no cgroup2 hierarchy on this host", "mount cgroup2 (a kernel of 5.14 "
                               "or later) to run builds and DUTs as tenants")
        v2_only = unified == CGROUP_ROOT
        dirs = [_make(unified / "labwarden" / name, v2_only and (pids_max or memory_bytes))]
        group = cls(name, dirs)
        group.kill()  # a cgroup left by a server that died: its processes are no tenant's now
        if v2_only:
            if pids_max is not None:
                (dirs[0] / "pids.max").write_text(str(pids_max))
            if memory_bytes is not None:
                (dirs[0] / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):  # exists only with swap accounting
                    (dirs[0] / "memory.swap.max").write_text("0")
            return group
        if pids_max is not None:
            pids = _make(CGROUP_ROOT / "pids" / _own_path("pids").lstrip("/") / "labwarden" / name)
            (pids / "pids.max").write_text(str(pids_max))
            dirs.append(pids)
        if memory_bytes is not None:
            mem = _make(CGROUP_ROOT / "memory" / _own_path("memory").lstrip("/") / "labwarden" / name)
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # memsw exists only with swap accounting
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            dirs.append(mem)
        return group

    @classmethod
    def existing(cls, name: str) -> Cgroup | None:
        """The cgroup `name` as another process made it, by its cgroup2 directory alone (enough
        to list, kill and remove its processes); None when there is none."""
        unified = _unified()
        path = unified / "labwarden" / name if unified is not None else None
        return cls(name, [path]) if path is not None and path.is_dir() else None

    def enter(self, argv: list[str]) -> list[str]:
        """`argv` run inside this cgroup from its first instruction: a shell joins every
        hierarchy, then execs it (joining after the start would let a fast fork escape)."""
        joins = 'for d; do [ "$d" = -- ] && break; echo $$ >"$d/cgroup.procs" || exit 125; done'
        script = f'{joins}; while [ "$1" != -- ]; do shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", script, "lw-cgroup", *map(str, self.dirs), "--", *argv]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.unified / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill(self, wait_s: float = KILL_WAIT_S) -> None:
        """SIGKILL every process in the cgroup and wait until none is left."""
        kill = self.unified / "cgroup.kill"
        if not kill.exists():
            return
        kill.write_text("1")
        deadline = time.monotonic() + wait_s
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.02)

    def events(self) -> dict[str, int]:
        """What the limits refused: `pids` (forks refused at pids_max), `oom_kill` (processes
        the memory limit killed)."""
        out = {"pids": 0, "oom_kill": 0}
        for d in self.dirs:
            for fname, key, field_name in (("pids.events", "pids", "max"),
                                           ("memory.events", "oom_kill", "oom_kill"),
                                           ("memory.oom_control", "oom_kill", "oom_kill")):
                with contextlib.suppress(OSError, ValueError):
                    for line in (d / fname).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == field_name:
                            out[key] = max(out[key], int(v))
        return out

    def remove(self) -> None:
        """Kill what is left, then remove the directories."""
        self.kill()
        for d in reversed(self.dirs):
            with contextlib.suppress(OSError):
                d.rmdir()


def _make(path: Path, controllers: object = None) -> Path:
    if controllers:  # cgroup2 alone: the parents must hand pids and memory down
        for parent in (path.parent.parent, path.parent):
            parent.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):
                (parent / "cgroup.subtree_control").write_text("+pids +memory")
    path.mkdir(parents=True, exist_ok=True)
    return path
