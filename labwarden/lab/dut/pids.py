"""DUT processes by pid: find them by name (/proc/*/comm; no `pidof` binary needed) and send them
a signal from a fixed allowlist. (procs.py builds on these: which instance of a process runs.)"""

from __future__ import annotations

from labwarden.core.devtext import quote
from labwarden.lab.dut.commands import Commands
from labwarden.lab.dut.errors import CommandFailed

SIGNALS = ("STOP", "CONT", "TERM", "KILL", "HUP", "INT", "USR1", "USR2")
"""The only signal names `Device.signal` sends."""

_PIDOF = ('for d in /proc/[0-9]*; do { IFS= read -r c <"$d/comm"; } 2>/dev/null '
          '&& [ "x$c" = "x$1" ] && [ "${d#/proc/}" != "$$" ] && echo "${d#/proc/}"; done; exit 0')
"""Constant script for pidof; the name arrives as $1, never inside the script text."""


async def pidof(commands: Commands, name: str) -> list[int]:
    """Pids whose /proc/PID/comm equals name (the kernel keeps only its first 15 bytes)."""
    if not name or any(c in name for c in "/\n\0"):
        raise ValueError(f"name must be a process name (no '/', newline or NUL), got {name!r}")
    comm = name.encode()[:15].decode(errors="ignore")
    res = await commands.run(["sh", "-c", _PIDOF, "sh", comm], check=True)
    return sorted(int(p) for p in res.stdout.split())


async def send_signal(commands: Commands, pid: int, sig: str) -> None:
    """`kill -SIG pid`; sig must be one of SIGNALS and pid > 1."""
    if sig not in SIGNALS:
        raise ValueError(f"sig must be one of {', '.join(SIGNALS)}; got {sig!r}")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
        raise ValueError(f"pid must be an int > 1; got {pid!r}")
    res = await commands.run(["kill", f"-{sig}", str(pid)])
    if res.exit_status != 0:
        raise CommandFailed(f"kill -{sig} {pid} on {commands.addr} failed: {quote(res.stderr)}",
                            "is the process still there? pids change across restarts: "
                            "look it up again with pidof")
