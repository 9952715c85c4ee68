"""Host-side process bookkeeping for the vlab: pid files, liveness, and the final sweep."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return not alive(pid)


def stop(pid: int | None, timeout: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL after `timeout`. True if the process was running."""
    if not alive(pid):
        return False
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 2.0)
    return True


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
