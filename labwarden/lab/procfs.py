"""Read a process's CPU time, RSS and IO from /proc text (the same parser serves a local /proc
and text fetched from a DUT over SSH).

/proc/PID/stat is split after the last ')' because comm may hold spaces and parentheses; times
are in clock ticks of the *DUT's* CLK_TCK (`getconf CLK_TCK`), which is not the kernel's HZ.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel, Field


class ProcStat(BaseModel):
    pid: int
    comm: str
    state: str
    utime: int = Field(description="user time, clock ticks")
    stime: int = Field(description="system time, clock ticks")
    starttime: int = Field(description="ticks after boot; changes when a pid is reused")
    rss_pages: int


def parse_stat(text: str) -> ProcStat:
    head, _, tail = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    f = tail.split()
    # fields after ')' start at field 3 (state): utime=14, stime=15, starttime=22, rss=24
    return ProcStat(pid=int(pid_s), comm=comm, state=f[0], utime=int(f[11]), stime=int(f[12]),
                    starttime=int(f[19]), rss_pages=int(f[21]))


def read_stat(pid: int, proc: Path = Path("/proc")) -> ProcStat:
    return parse_stat((proc / str(pid) / "stat").read_text())


def clk_tck() -> int:
    return os.sysconf("SC_CLK_TCK")


def cpu_percent(before: ProcStat, after: ProcStat, wall_s: float, ticks_per_s: int) -> float:
    """CPU% of one core between two samples of the same process instance."""
    if before.pid != after.pid or before.starttime != after.starttime:
        raise ValueError(f"pid {before.pid} was replaced between samples (restart)")
    ticks = (after.utime + after.stime) - (before.utime + before.stime)
    return 100.0 * ticks / ticks_per_s / wall_s


def measure_cpu(pid: int, window_s: float) -> float:
    """CPU% of `pid` over a window on this host (the vlab bench and tests use it)."""
    t0, s0 = time.monotonic(), read_stat(pid)
    time.sleep(window_s)
    t1, s1 = time.monotonic(), read_stat(pid)
    return cpu_percent(s0, s1, t1 - t0, clk_tck())
