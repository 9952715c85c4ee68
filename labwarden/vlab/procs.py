"""Host-side process bookkeeping for the vlab: the final sweep of what `down` must stop."""

from __future__ import annotations

import os
from pathlib import Path

from labwarden.lab.host.pidfile import alive, read_pid, stop, wait_gone

__all__ = ["alive", "processes_under", "read_pid", "stop", "wait_gone"]


def processes_under(root: Path) -> list[int]:
    """Pids of DUT/load processes (executable under `root`) and of its DUT daemon."""
    needle = str(root)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            exe = os.readlink(f"/proc/{entry}/exe")
        except OSError:
            continue
        ours = exe.startswith(needle + "/") or ("labwarden.vlab.dutd" in cmdline
                                                and needle in cmdline)
        if ours and alive(int(entry)):
            found.append(int(entry))
    return found
