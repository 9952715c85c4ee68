"""`labwarden doctor`: is this machine ready for the lab? Each check says the exact remedy.

Output is sorted like pyperf's `system show`: ok / missing, with the fix for each miss. What needs
root (uprobes, perf on other users' processes) is reported, never crashed on.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.lab.host.binaries import which

TRACEFS = Path("/sys/kernel/tracing")


class Check(BaseModel):
    name: str
    ok: bool
    detail: str
    remedy: str | None = Field(None, description="exact command or step that fixes it")
    needed_for: str


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not runnable: {exc}"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""


def checks() -> list[Check]:
    root = os.geteuid() == 0
    out: list[Check] = []
    perf = which("perf")
    out.append(Check(name="perf", ok=perf is not None,
                     detail=_version([perf, "--version"]) if perf else "not found",
                     remedy=None if perf else "apt-get install linux-perf  (or `make setup` as root)",
                     needed_for="profile, uprobe counters"))
    try:
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    except (OSError, ValueError):
        paranoid = 99
    ok = root or paranoid <= 1
    out.append(Check(name="perf_event_paranoid", ok=ok,
                     detail=f"{paranoid}" + (" (root: not limiting)" if root else ""),
                     remedy=None if ok else "sysctl -w kernel.perf_event_paranoid=1  (as root)",
                     needed_for="perf record of the target process"))
    mounted = (TRACEFS / "uprobe_events").exists()
    out.append(Check(name="tracefs", ok=mounted,
                     detail=str(TRACEFS) + (" mounted" if mounted else " not mounted"),
                     remedy=None if mounted else "mount -t tracefs nodev /sys/kernel/tracing  (as root)",
                     needed_for="uprobe counters"))
    from labwarden.lab.host import tracefs

    reason = tracefs.available(TRACEFS) if mounted else "tracefs missing"
    out.append(Check(name="uprobes", ok=reason is None,
                     detail="uprobe_events writable and responsive" if reason is None else reason,
                     remedy=None if reason is None else
                     ("reboot (a kernel deadlock holds tracefs)" if "stuck" in reason
                      else "run as root (uprobes are registered in tracefs)"),
                     needed_for="uprobe counters (RPC/s, write-txns/s)"))
    for tool, remedy in (
        ("inferno-collapse-perf", "make setup  (cargo install inferno --locked --root .tools)"),
        ("inferno-flamegraph", "make setup  (cargo install inferno --locked --root .tools)"),
        ("cargo", "install Rust with rustup, or apt-get install cargo"),
        ("gcc", "apt-get install gcc"),
        ("make", "apt-get install make"),
        ("git", "apt-get install git"),
        ("objcopy", "apt-get install binutils"),
        ("bwrap", "apt-get install bubblewrap  (or `make setup` as root)"),
    ):
        path = which(tool)
        out.append(Check(name=tool, ok=path is not None, detail=path or "not found",
                         remedy=None if path else remedy,
                         needed_for="symbolize" if tool.startswith("inferno") or tool == "cargo"
                         else "every build of patched code (confined), the vlab's services"
                         if tool == "bwrap" else "vlab firmware build"))
    return out
