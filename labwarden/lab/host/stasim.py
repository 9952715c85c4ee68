"""The load side: a station simulator holding N clients (the vlab's stasim; CDRouter's role in
seed 000). It runs on the load host, not on the DUT. One pid file per lab, so every door (the
`associate` tool, `labwarden vlab associate`) drives the same generator and load never doubles.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel

from labwarden.core.errors import LabError
from labwarden.lab.config import StasimLoadSection
from labwarden.lab.host import pidfile


class LoadError(LabError):
    """The load generator cannot hold the clients asked for."""

    kind = "device"


class StasimLoad(BaseModel):
    binary: Path
    socket: str
    pidfile: Path
    log: Path

    @classmethod
    def of(cls, section: StasimLoadSection) -> StasimLoad:
        """The generator a lab profile's [load] section describes."""
        return cls(binary=Path(section.binary).expanduser(), socket=section.socket,
                   pidfile=Path(section.pidfile).expanduser(), log=Path(section.log).expanduser())

    def running(self) -> bool:
        return pidfile.alive(pidfile.read_pid(self.pidfile))

    def holding(self) -> int:
        """How many stations the running generator holds (its own `-n`; 0 when none runs)."""
        pid = pidfile.read_pid(self.pidfile)
        if not pidfile.alive(pid):
            return 0
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            return int(argv[argv.index(b"-n") + 1])
        except (OSError, ValueError, IndexError):
            return -1  # not a generator this lab started: not what was asked

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM: stasim disassociates its stations, then exits (SIGKILL after `timeout`)."""
        pidfile.stop(pidfile.read_pid(self.pidfile), timeout)
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()

    def hold(self, stations: int) -> None:
        """Replace whatever load runs by `stations` clients (0 = none)."""
        if stations < 0:
            raise LoadError(f"stations must be >= 0, got {stations}", "e.g. stations = 114")
        if not self.binary.is_file():
            raise LoadError(f"load generator not found: {self.binary}",
                            "check [load] binary in the lab profile")
        self.stop()
        if stations == 0:
            return
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            proc = subprocess.Popen(
                [str(self.binary), "--socket", self.socket, "-n", str(stations)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env=os.environ.copy())
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        time.sleep(0.05)
        if proc.poll() is not None:
            raise LoadError(f"stasim exited at once with status {proc.returncode}",
                            f"see {self.log}")
