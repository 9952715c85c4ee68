"""Device: the only way tools talk to a DUT -- one pinned-key asyncssh connection per DUT.

Device is the door; the work is done by its parts, one job each:
connection.py (pin the host key, connect, reconnect with backoff), commands.py (argv on the
persistent `/bin/sh` channel of channel.py, ~1 ms warm round trip, or a fresh SSH exec),
files.py (SFTP), pids.py (pidof, signals). Every failure is a DeviceError (errors.py) whose
`remedy` names the fix. The interface, with its rules, is protocol.py's DutAccess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from labwarden.lab.dut import pids
from labwarden.lab.dut.commands import Commands, RunResult
from labwarden.lab.dut.connection import Connection
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.dut.files import Files


class Device:
    """One DUT over SSH: a pinned-key connection, reconnected with backoff when it drops.

    Satisfies labwarden.lab.dut.protocol.DutAccess (tests/test_dut_protocol.py checks it)."""

    def __init__(self, endpoint: SshEndpoint, *, connect_timeout: float = 10, retries: int = 3,
                 env: Mapping[str, str] | None = None, unreachable_remedy: str | None = None):
        """`endpoint` is the DUT's SSH endpoint (the profile's `[target]` is the measured process);
        `retries` is the number of connection attempts before Unreachable (at least one); `env`
        is exported for every command, on the channel and each exec (the profile's `[dut] env`:
        PATH above all, since no login shell runs). A missing or malformed host key pin raises
        DeviceError here, before any connect; a bad env name raises ValueError.
        `unreachable_remedy` is what an Unreachable error tells to do (lab/reach.py)."""
        self._connection = Connection(endpoint, connect_timeout=connect_timeout, retries=retries,
                                      remedy=unreachable_remedy)
        self._commands = Commands(self._connection, env)
        self._files = Files(self._connection, self._commands)
        self.place: Any = None
        """The labgrid PlaceLease this DUT is reached through, or whose place it is ([dut.place]);
        None for a DUT of no place. The guard holds it before every call that touches the DUT;
        flash and power drivers act through it."""

    @property
    def endpoint(self) -> SshEndpoint:
        """The SSH endpoint of the DUT."""
        return self._connection.endpoint

    @property
    def addr(self) -> str:
        """`host:port`, as messages name the DUT."""
        return self._connection.addr

    @property
    def stray_output(self) -> list[str]:
        """What the DUT printed outside any reply on the command channel (a login banner, an rc
        file): discarded from command output, kept here (most recent last) to be reported."""
        return list(self._commands.stray)

    @property
    def connect_timeout(self) -> float:
        """Seconds one connection attempt may take."""
        return self._connection.connect_timeout

    @property
    def retries(self) -> int:
        """Connection attempts before Unreachable."""
        return self._connection.retries

    # -- connection ---------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect unless connected; after a drop, reconnect with exponential backoff."""
        await self._connection.ensure()

    async def close(self) -> None:
        """Close the channel, SFTP and the connection (idempotent)."""
        self._commands.close()
        self._files.close()
        await self._connection.close()

    async def __aenter__(self) -> Device:
        await self.connect()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def wait_reachable(self, timeout: float) -> None:
        """Poll until the DUT answers a command (after a reboot or flash); Unreachable if not."""
        await self._commands.wait_reachable(timeout)

    # -- commands -----------------------------------------------------------------------------

    async def run(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536,
                  check: bool = False) -> RunResult:
        """Run argv on the persistent channel (literally: no shell parses it); serialised."""
        return await self._commands.run(argv, timeout=timeout, cap=cap, check=check)

    async def exec(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536) -> RunResult:
        """Run argv as a fresh SSH exec (for long or background work); stdin is empty."""
        return await self._commands.exec(argv, timeout=timeout, cap=cap)

    # -- files --------------------------------------------------------------------------------

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> bytes:
        """A file's bytes (SFTP); RemoteFileError if it is larger than max_bytes."""
        return await self._files.read_file(path, max_bytes)

    async def read_head(self, path: str, n: int = 65536) -> bytes:
        """The first `n` bytes of a file (SFTP): an ELF's headers and notes, of a binary of any size."""
        return await self._files.read_head(path, n)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write a file (SFTP) atomically: a temp file beside it, renamed over it."""
        await self._files.write_file(path, data)

    async def put(self, local: Path, remote: str) -> str:
        """Copy a local file to the DUT (SFTP, atomic rename); returns its sha256 as verified there."""
        return await self._files.put(local, remote)

    async def get(self, remote: str, local: Path) -> str:
        """Copy a DUT file here (SFTP); returns its sha256, verified against the DUT's sha256sum."""
        return await self._files.get(remote, local)

    async def sha256(self, paths: Sequence[str]) -> dict[str, str | None]:
        """sha256 of each path in one `sha256sum` call; None where a path is missing or unreadable."""
        return await self._files.sha256(paths)

    # -- processes ----------------------------------------------------------------------------

    async def pidof(self, name: str) -> list[int]:
        """Pids whose /proc/PID/comm equals name (the kernel keeps only its first 15 bytes)."""
        return await pids.pidof(self._commands, name)

    async def signal(self, pid: int, sig: str) -> None:
        """`kill -SIG pid`; sig must be one of pids.SIGNALS and pid > 1."""
        await pids.send_signal(self._commands, pid, sig)
