"""The vlab DUT's services (stad, stamon: firmware an agent may have patched) run confined on
the host, not as root: bubblewrap sets up a mount namespace as root, then setpriv drops to
nobody with no capabilities and no_new_privs. They see the DUT's own files at their usual
paths, read-only -- its rootfs, overlay and /etc (uci config) -- plus /usr for the C library,
and write only the socket directory (`run/sta/`). Not the vlab's keys, data dir or
transcripts, not the host's home. No pid namespace: the host sees their real pids (perf,
uprobes, SIGSTOP and the pid files work as on a real DUT); no network namespace needed (the RPC
is a unix socket), but none is kept: they get an empty one.

Without bubblewrap (or when the DUT daemon is not root) the services run as the daemon's user,
as before; `labwarden doctor` and setup-system.sh name bubblewrap.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from labwarden.lab.host import sandbox
from labwarden.vlab.layout import VlabLayout


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("bwrap") is not None


def socket_dir(layout: VlabLayout) -> Path:
    """The one directory the services write (stad's socket), owned by nobody; created here."""
    path = layout.socket.parent
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, sandbox.NOBODY, sandbox.NOBODY)
    return path


def wrap(argv: list[str], layout: VlabLayout, info_fd: int) -> list[str]:
    """`argv` run as nobody in the DUT's view of the host; bwrap writes {"child-pid": N} (the
    service's host pid) to `info_fd`."""
    ro = [layout.rootfs, layout.overlay, layout.root / "etc"]
    args = [sandbox.bwrap(), "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--new-session", "--info-fd", str(info_fd),
            *sandbox.system_binds(), "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp"]
    for path in ro:
        if path.exists():
            args += [*sandbox.parent_dirs(str(path)), "--ro-bind", str(path), str(path)]
    sock = socket_dir(layout)
    args += [*sandbox.parent_dirs(str(sock)), "--bind", str(sock), str(sock),
             "--chdir", "/", "--",
             "setpriv", f"--reuid={sandbox.NOBODY}", f"--regid={sandbox.NOBODY}", "--clear-groups",
             "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all",
             # bwrap's --die-with-parent is a parent-death signal, and the kernel clears it when
             # setpriv changes the uid: set again after the change. It is still no guarantee: the
             # kernel sends it with the dying parent's credentials, and bwrap's own process (uid 0
             # with every capability dropped, no CAP_KILL) may not signal a nobody process -- so a
             # service outlives a dutd killed outright (kill -9). supervisor.stop_all signals each
             # service itself (a reboot), and `vlab up`/`down` stop what a dead dutd left.
             "--pdeathsig=SIGKILL", "--"]
    return [*args, *argv]


def child_pid(info_r: int) -> int | None:
    """The service's pid from bwrap's info fd (None when bwrap failed before starting it)."""
    with os.fdopen(info_r, "rb") as f:
        data = f.read()
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError):
        return None
