"""The vlab DUT's services (stad, stamon: firmware an agent may have patched) run on the host as
tenants of their own, not as root: bubblewrap sets up the namespaces as root, then setpriv drops
to a uid leased for this DUT (lab/host/tenancy.py) with no capabilities and no_new_privs.

- **Uids.** The daemon under test (stad) and the monitor (stamon) each get a uid of the DUT range,
  leased by the DUT daemon for its life: no build, no other DUT (a fleet's other places
  included) and not the monitor share the daemon's uid, so the kernel refuses it signals, ptrace,
  /proc/PID/mem and /proc/PID/root of every other tenant. The load side (stasim) runs from the
  host as its caller (root), not as stad's uid.
- **Pid namespace.** Each service has one of its own: its /proc shows bwrap's init, the service
  and what it forked, nothing of the host. bwrap's init is the namespace's pid 1 and the service
  its child (not `--as-pid-1`): an ns init ignores every signal it has no handler for (SIGKILL
  and SIGSTOP from the host aside), so as pid 1 a service would ignore a TERM that comes before
  its handler is set, and HUP or USR1 from `Device.signal`, unlike on a real DUT. As pid 2 it
  takes every signal as any process does, and the pid files hold its real host pid
  (`service_pid`): perf, uprobes, /proc/PID/stat, SIGSTOP/SIGCONT work unchanged. When the init
  dies the kernel kills the whole namespace: a dutd killed outright takes its services with it
  (its parent-death signal reaches bwrap and bwrap's init, both root).
- **Cgroup.** Each service runs in a cgroup of its own from its first instruction (bwrap
  included), named after the DUT's state dir so that `vlab up`/`down` find it after a daemon died.
  bwrap's init waits for every process in the namespace, so the supervisor waits for the service
  itself and then kills the cgroup: a respawn, reboot, flash or `down` ends everything the
  firmware started, wherever it moved in the process tree (not a pid list).
- **Files.** They see the DUT's own files at their usual paths, read-only -- its rootfs, overlay
  and /etc (uci config) -- plus /usr for the C library, and write only the socket directory
  (`run/sta/`, owned by stad's uid; the supervisor gives stad's socket stamon's group). Not the
  vlab's keys, data dir or transcripts, not the host's home. No network (an empty namespace: the
  RPC is a unix socket).

Without bubblewrap (or when the DUT daemon is not root) the services run as the daemon's user,
as before; `labwarden doctor` and setup-system.sh name bubblewrap.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from labwarden.lab.host import sandbox, tenancy
from labwarden.vlab.layout import SERVICES, VlabLayout

PIDS_MAX = 512
"""Processes and threads of one service and all it forks (stad has one thread)."""
MEMORY_BYTES = 2 << 30
"""One service's memory as a whole (stad holds a few MB at 114 stations)."""


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("bwrap") is not None


@dataclass
class Tenant:
    """One service's place on the host: a uid leased for the DUT daemon's life, a cgroup."""

    lease: tenancy.UidLease
    cgroup: tenancy.Cgroup

    @property
    def uid(self) -> int:
        return self.lease.uid

    def close(self, layout: VlabLayout) -> None:
        self.cgroup.remove()
        with contextlib.suppress(FileNotFoundError):
            _cgroup_record(layout, self.cgroup.name).unlink()
        self.lease.release()


def cgroup_name(layout: VlabLayout, service: str) -> str:
    """Stable per state dir (not per uid): a later `up` or `down` finds what a dead daemon left."""
    return f"dut-{hashlib.sha256(str(layout.root).encode()).hexdigest()[:12]}-{service}"


def _cgroup_record(layout: VlabLayout, group: str) -> Path:
    return layout.run_dir / f"{group}.cgroup"


def tenants(layout: VlabLayout) -> dict[str, Tenant]:
    """A uid and a cgroup per service (a cgroup a dead daemon left is emptied first). Each
    cgroup's directories are recorded in run/: v1 ones lie below the daemon's own cgroup, which
    `down` (another process) cannot know."""
    made: dict[str, Tenant] = {}
    try:
        for name in SERVICES:
            lease = tenancy.lease_uid("dut")
            try:
                group = tenancy.Cgroup.create(cgroup_name(layout, name), pids_max=PIDS_MAX,
                                              memory_bytes=MEMORY_BYTES)
            except BaseException:
                lease.release()
                raise
            made[name] = Tenant(lease, group)
            _cgroup_record(layout, group.name).write_text("".join(f"{d}\n" for d in group.dirs))
    except BaseException:
        for tenant in made.values():
            tenant.close(layout)
        raise
    return made


def end_leftovers(layout: VlabLayout) -> list[int]:
    """Kill whatever runs in the DUT's service cgroups and remove them: what a daemon killed
    outright left (its services end with their namespaces' init, but `down` must not rely on
    it)."""
    killed: list[int] = []
    for name in SERVICES:
        record = _cgroup_record(layout, cgroup_name(layout, name))
        try:
            group: tenancy.Cgroup | None = tenancy.Cgroup(
                cgroup_name(layout, name), [Path(d) for d in record.read_text().split()])
        except OSError:
            group = tenancy.Cgroup.existing(cgroup_name(layout, name))
        if group is not None and group.dirs:
            killed += group.pids()
            group.remove()
        with contextlib.suppress(FileNotFoundError):
            record.unlink()
    return killed


def socket_dir(layout: VlabLayout, owner: int) -> Path:
    """The one directory the services write (stad's socket), owned by stad's uid; created here."""
    path = layout.socket.parent
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, owner, owner)
        path.chmod(0o755)
    return path


def open_socket(layout: VlabLayout, monitor_gid: int) -> None:
    """Let stamon connect to the socket stad's uid created (connect needs write on it): its group
    becomes the monitor's, rw for the group, nothing for other uids."""
    with contextlib.suppress(FileNotFoundError):
        os.chown(layout.socket, -1, monitor_gid)
        layout.socket.chmod(0o660)


def wrap(argv: list[str], layout: VlabLayout, info_fd: int, uid: int, sock_owner: int) -> list[str]:
    """`argv` run as `uid` in a pid namespace of its own, in the DUT's view of the host; bwrap
    writes {"child-pid": N} (the host pid of the namespace's init) to `info_fd`."""
    ro = [layout.rootfs, layout.overlay, layout.root / "etc"]
    args = [sandbox.bwrap(), "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--info-fd", str(info_fd),
            *sandbox.system_binds(), "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp"]
    for path in ro:
        if path.exists():
            args += [*sandbox.parent_dirs(str(path)), "--ro-bind", str(path), str(path)]
    sock = socket_dir(layout, sock_owner)
    args += [*sandbox.parent_dirs(str(sock)), "--bind", str(sock), str(sock),
             "--chdir", "/", "--",
             "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
             "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all",
             # bwrap's --die-with-parent is a parent-death signal, and the kernel clears it when
             # setpriv changes the uid: set again after the change. It is still no guarantee (the
             # kernel sends it with the dying parent's credentials): the service's cgroup is.
             "--pdeathsig=SIGKILL", "--"]
    return [*args, *argv]


def child_pid(info_r: int) -> int | None:
    """The host pid of the namespace's init from bwrap's info fd (None when bwrap failed before
    starting it)."""
    with os.fdopen(info_r, "rb") as f:
        data = f.read()
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError):
        return None


def service_pid(init: int, group: tenancy.Cgroup, timeout: float = 5.0) -> int | None:
    """The service's host pid: the namespace's pid 2, the process its init forks first once the
    mounts are set up (None when it never showed or has already ended). Looked up among the
    cgroup's few processes: this kernel has no /proc/PID/task/TID/children."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and os.path.exists(f"/proc/{init}"):
        for pid in group.pids():
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                fields = dict(ln.split(":\t", 1) for ln in status.splitlines() if ":\t" in ln)
                if fields.get("PPid") == str(init) and fields.get("NSpid", "").split()[-1:] == ["2"]:
                    return pid
        time.sleep(0.005)
    return None
