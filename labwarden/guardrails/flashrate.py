"""Flashes per hour, per DUT, across sessions and processes.

A session-local counter let `labwarden call flash` twice in a row flash twice, and its remedy
("start a new session") was the bypass. The record is a small JSON file in the lab's data dir,
read and rewritten under an exclusive lock (flock), so the check and the take are one step for
every session of every process on this host. A flash takes its slot before it runs and gives
it back only if it failed; a process killed mid-flash keeps its slot (it may have flashed).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

WINDOW_S = 3600.0
FILE = "flashes.json"


class FlashRate:
    """The flash record of one DUT (`dut`: its address) in a lab's data dir."""

    def __init__(self, data_dir: Path, dut: str, limit: int | None) -> None:
        self.path = data_dir / FILE
        self.lock = data_dir / f"{FILE}.lock"
        self.dut = dut
        self.limit = limit

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[dict[str, Any]]]:
        """The record's entries (younger than the window), locked; written back on exit."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held for a read and a rename: microseconds
            try:
                entries = json.loads(self.path.read_text()).get("flashes", [])
            except (OSError, ValueError, AttributeError):
                entries = []
            now = time.time()
            entries = [e for e in entries if isinstance(e, dict)
                       and isinstance(e.get("at"), (int, float)) and now - float(e["at"]) < WINDOW_S]
            yield entries
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": 1, "flashes": entries}))
            tmp.replace(self.path)
        finally:
            os.close(fd)  # releases the lock

    def reserve(self, session: str) -> tuple[str | None, float | None]:
        """Take a slot for one flash of this DUT: (None, token) when it may run, (why not,
        None) when the last hour is full."""
        with self._locked() as entries:
            mine = sorted(float(e["at"]) for e in entries if e.get("dut") == self.dut)
            if self.limit is not None and len(mine) >= self.limit:
                free_at = datetime.fromtimestamp(mine[0] + WINDOW_S, UTC)
                return (f"flashes: {len(mine)} of this DUT in the last hour (limit {self.limit}, "
                        f"across every session); the next is allowed at {free_at:%H:%M:%S} UTC"), None
            token = time.time()
            entries.append({"at": token, "dut": self.dut, "session": session})
            return None, token

    def release(self, token: float) -> None:
        """Give back a slot whose flash did not happen (it failed before changing the DUT)."""
        with self._locked() as entries:
            entries[:] = [e for e in entries if not (e.get("dut") == self.dut and e.get("at") == token)]


REMEDY = ("wait until the time named above; the limit is per DUT and holds across sessions (a "
          "person may raise [policy.budgets] flashes_per_hour in the lab profile)")
