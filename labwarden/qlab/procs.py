"""Host processes of one qlab: its daemon and its QEMU, found by their command lines (a QEMU
whose daemon was killed keeps running, and `qlab down` must still find it)."""

from __future__ import annotations

import os
from pathlib import Path

from labwarden.lab.host.pidfile import alive, read_pid, stop
from labwarden.qlab.layout import QlabLayout

__all__ = ["alive", "daemon_pid", "qemu_pids", "read_pid", "stop"]


def _cmdline(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def qemu_pids(layout: QlabLayout) -> list[int]:
    """QEMU processes of this qlab: their serial port writes to its console log."""
    needle = f"file:{layout.console_log}"
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            argv = _cmdline(entry)
            if argv and os.path.basename(argv[0]).startswith("qemu-system") and needle in argv \
                    and alive(int(entry)):
                found.append(int(entry))
    return sorted(found)


def daemon_pid(layout: QlabLayout) -> int | None:
    """The running daemon of this qlab, if its pid file names one that is alive and is it."""
    pid = read_pid(layout.daemon_pid)
    if pid is None or not alive(pid):
        return None
    argv = _cmdline(str(pid))
    return pid if "labwarden.qlab.daemon" in argv and str(layout.root) in argv else None
