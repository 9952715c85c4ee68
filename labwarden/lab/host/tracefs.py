"""This host's tracefs: whether uprobes work here, and probes on local processes (the vlab's
benches and tests count with them; DUT probes go through lab/dut/uprobes.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from labwarden.lab.elfsym import UprobeError, dynsym_offset
from labwarden.lab.perfcount import GROUP, WEDGED, parse_perf_stat_csv, perf_stat_argv, probe_line

TRACEFS = Path("/sys/kernel/tracing")


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


def count(events: list[str], pid: int, window_s: float) -> dict[str, int]:
    """Count `events` in `pid` over a window on this host."""
    out = subprocess.run(perf_stat_argv(events, pid, window_s), capture_output=True, text=True,
                         timeout=window_s + 30)
    if out.returncode != 0:
        raise UprobeError(f"perf stat failed: {out.stderr.strip()[-400:]}")
    return parse_perf_stat_csv(out.stderr)
