"""DutAccess: what tools may ask of a DUT. `Device` (device.py) is its implementation over SSH;
tests/test_dut_protocol.py fails when the two drift apart.

Every failure is a `DeviceError` (errors.py, a LabError of kind "device") with a `problem` and a
`remedy`: Unreachable, HostKeyMismatch and AuthRefused from connecting (the last two never
retried), CommandTimeout, ConnectionLost and CommandFailed from commands, RemoteFileError from
files. Invalid arguments (an empty argv, a NUL byte, a signal outside the allowlist) raise
ValueError before anything reaches the DUT.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from labwarden.lab.dut.commands import RunResult


@runtime_checkable
class DutAccess(Protocol):
    """One DUT: commands, files and processes over one kept-warm connection.

    The persistent command channel (`run`): one long-lived `/bin/sh` session on the connection,
    asked for as a command (`exec /bin/sh -s`), so the DUT's sshd never starts a login shell and
    /etc/profile never runs; the environment the profile names (`[dut] env`) is exported once
    when it opens, and every `exec` gets the same. Each request is one write to its stdin: a
    random start marker (printed on stdout and stderr), the argv with every element
    single-quoted -- always, even where `shlex.quote` would leave a word bare (`if` or `a=b` as
    argv[0] would otherwise be shell syntax or an assignment) -- run in a subshell with
    `</dev/null` (so `exit`, `cd`, `exec` as argv[0] cannot hurt the channel), then an end marker
    with the exit status. The client reads both streams between the markers, counts their bytes
    and keeps at most `cap` of each; what arrives before a start marker (a banner, an rc file's
    output) is discarded and reported (`Device.stray_output`). Requests are serialised (one at a
    time; concurrent callers wait). A timeout, a broken channel or a cancelled request closes the
    channel and the next request opens a fresh one. Only POSIX sh and printf are needed on the
    DUT (busybox ash is enough). Warm round trip: ~1 ms p50 (bench/device_rtt.py).

    Closing a channel or session (a timeout, a cancel) does not stop what it runs: the vlab's
    sshd hangs the session's process group up with SIGHUP, but OpenSSH and dropbear send SIGHUP
    only to sessions with a terminal, and these have none. Long work runs as a job (jobs.py: a
    pid file in the DUT's tmp) that labwarden stops itself over a fresh command.
    """

    async def connect(self) -> None:
        """Connect unless connected (idempotent); after a drop, reconnect with exponential
        backoff. The host key is pinned: an unknown or changed key is refused, never retried."""
        ...

    async def close(self) -> None:
        """Close the channel, SFTP and the connection (idempotent)."""
        ...

    async def run(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536,
                  check: bool = False) -> RunResult:
        """Run argv on the persistent channel: literally, argv[0] is the program, no shell parses
        the words. `check=True` raises CommandFailed on a non-zero exit; exit status 128+N when
        killed by signal N."""
        ...

    async def exec(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536) -> RunResult:
        """Run argv as a fresh SSH exec on the same connection (for long or background work;
        slower than a channel request); argv quoted as for `run`, stdin empty."""
        ...

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> bytes:
        """A file's bytes (SFTP); RemoteFileError if it is larger than max_bytes."""
        ...

    async def read_head(self, path: str, n: int = 65536) -> bytes:
        """The first `n` bytes of a file (SFTP): an ELF's headers and notes, of a binary of any size."""
        ...

    async def write_file(self, path: str, data: bytes) -> None:
        """Write a file (SFTP) atomically: a temp file beside it, renamed over it; an existing
        file keeps its mode."""
        ...

    async def put(self, local: Path, remote: str) -> str:
        """Copy a local file to the DUT (SFTP, atomic rename); returns its sha256, verified on the
        DUT. The copy's mode is not set: chmod it if it must run."""
        ...

    async def get(self, remote: str, local: Path) -> str:
        """Copy a DUT file here (SFTP, atomic rename); returns its sha256, verified against the
        DUT's `sha256sum`."""
        ...

    async def sha256(self, paths: Sequence[str]) -> dict[str, str | None]:
        """sha256 of each path in one `sha256sum` call; None where a path is missing or unreadable."""
        ...

    async def pidof(self, name: str) -> list[int]:
        """Pids whose /proc/PID/comm equals name (the kernel keeps its first 15 bytes); no `pidof`
        binary needed on the DUT."""
        ...

    async def signal(self, pid: int, sig: str) -> None:
        """`kill -SIG pid`; sig from a fixed allowlist (pids.SIGNALS: STOP, CONT, TERM, ...), pid
        > 1; CommandFailed if kill fails (the process is gone)."""
        ...

    async def wait_reachable(self, timeout: float) -> None:
        """After a reboot or flash: poll until the DUT answers a command; Unreachable if it does
        not within timeout seconds."""
        ...
