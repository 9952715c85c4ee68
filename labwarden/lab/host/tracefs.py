"""Count calls of exported functions with uprobes registered in tracefs, read by `perf stat`.

`perf probe` is avoided on purpose (seed 000: it segfaulted on the DUT's perf); a uprobe line is
written to tracefs by hand, so the only requirement is a mounted tracefs and root.
Offset = .dynsym st_value - PT_LOAD p_vaddr + p_offset of the segment holding the symbol.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from elftools.elf.elffile import ELFFile

TRACEFS = Path("/sys/kernel/tracing")
GROUP = "labwarden"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class UprobeError(RuntimeError):
    pass


def dynsym_offset(elf_path: Path, symbol: str) -> int:
    """File offset of an exported function, as uprobe_events wants it."""
    with elf_path.open("rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        if dynsym is None:
            raise UprobeError(f"{elf_path} has no .dynsym")
        syms = dynsym.get_symbol_by_name(symbol)
        if not syms:
            raise UprobeError(f"{symbol} is not exported by {elf_path}")
        value = syms[0]["st_value"]
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= value < seg["p_vaddr"] + seg["p_memsz"]:
                return value - seg["p_vaddr"] + seg["p_offset"]
    raise UprobeError(f"{symbol} at {value:#x} is in no PT_LOAD segment of {elf_path}")


def probe_line(name: str, elf_path: Path, offset: int) -> str:
    if not _NAME_RE.match(name):
        raise UprobeError(f"bad probe name {name!r}: letters, digits and _ only")
    if any(c.isspace() for c in str(elf_path)):
        raise UprobeError(f"uprobe paths cannot contain whitespace: {elf_path}")
    return f"p:{GROUP}/{name} {elf_path}:{offset:#x}"


WEDGED = ("a read of {events} did not return within {t:g} s: a process is stuck in the kernel on "
          "the dynamic-events lock (see `ps -eo pid,stat,wchan:30,cmd | awk '$2 ~ /D/'`); it "
          "cannot be killed -- reboot the machine to recover")


def responsive(events: Path, timeout: float = 3.0) -> bool:
    """Read the file in a child process; a wedged tracefs blocks readers forever (state D), so the
    child is abandoned rather than waited for -- the caller must never block on it."""
    cat = shutil.which("cat") or "/bin/cat"  # not PATH-dependent: doctor runs with any PATH
    proc = subprocess.Popen([cat, str(events)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return True
        time.sleep(0.02)
    return False


def available(tracefs: Path = TRACEFS) -> str | None:
    """None if uprobes can be registered here, else the reason."""
    events = tracefs / "uprobe_events"
    if not events.exists():
        return f"tracefs not mounted at {tracefs} (mount -t tracefs nodev {tracefs})"
    if not os.access(events, os.W_OK):
        return f"{events} is not writable (uprobes need root)"
    if not responsive(events):
        return WEDGED.format(events=events, t=3)
    return None


def _append(events: Path, line: str) -> None:
    # O_APPEND without the seek Python's "a" mode does: tracefs answers a seek with EINVAL.
    fd = os.open(events, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@contextlib.contextmanager
def registered(probes: dict[str, tuple[Path, str]], tracefs: Path = TRACEFS) -> Iterator[list[str]]:
    """Register {name: (elf, symbol)}; yields perf event names; removes them, also on failure."""
    events = tracefs / "uprobe_events"
    done: list[str] = []
    try:
        for name, (elf, symbol) in probes.items():
            line = probe_line(name, elf, dynsym_offset(elf, symbol))
            _append(events, line)
            done.append(name)
        yield [f"{GROUP}:{n}" for n in done]
    finally:
        for name in done:
            with contextlib.suppress(OSError):
                _append(events, f"-:{GROUP}/{name}")


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


def count(events: list[str], pid: int, window_s: float) -> dict[str, int]:
    """Count `events` in `pid` over a window on this host."""
    out = subprocess.run(perf_stat_argv(events, pid, window_s), capture_output=True, text=True,
                         timeout=window_s + 30)
    if out.returncode != 0:
        raise UprobeError(f"perf stat failed: {out.stderr.strip()[-400:]}")
    return parse_perf_stat_csv(out.stderr)
