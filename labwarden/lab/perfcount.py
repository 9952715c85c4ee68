"""uprobe lines and their counts, the same on every side: a `p:` line for `uprobe_events` and
`perf stat -x,` parsed into counts.

`perf probe` is avoided on purpose (seed 000: it segfaulted on the DUT's perf); a uprobe line is
written to tracefs by hand, so the only requirement is a mounted tracefs and root. Uprobe names
are one kernel-wide namespace (FACTS): callers make each name unique.
"""

from __future__ import annotations

import re
from pathlib import Path

from labwarden.lab.elfsym import UprobeError

GROUP = "labwarden"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def probe_line(name: str, elf_path: Path, offset: int) -> str:
    if not _NAME_RE.match(name):
        raise UprobeError(f"bad probe name {name!r}: letters, digits and _ only")
    if any(c.isspace() for c in str(elf_path)):
        raise UprobeError(f"uprobe paths cannot contain whitespace: {elf_path}")
    return f"p:{GROUP}/{name} {elf_path}:{offset:#x}"


WEDGED = ("a read of {events} did not return within {t:g} s: a process is stuck in the kernel on "
          "the dynamic-events lock (see `ps -eo pid,stat,wchan:30,cmd | awk '$2 ~ /D/'`); it "
          "cannot be killed -- reboot the machine to recover")


def perf_stat_argv(events: list[str], pid: int, window_s: float, perf: str = "perf") -> list[str]:
    return [perf, "stat", "-x", ",", "-e", ",".join(events), "-p", str(pid), "--",
            "sleep", f"{window_s:g}"]


def parse_perf_stat_csv(text: str) -> dict[str, int]:
    """`perf stat -x,` lines: value,unit,event,... -> {event: count}."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) >= 3 and parts[0].strip().isdigit():
            counts[parts[2]] = int(parts[0])
        elif len(parts) >= 3 and parts[0].startswith("<not"):
            counts[parts[2]] = 0
    return counts


