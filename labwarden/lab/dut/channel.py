"""The wire format of Device's persistent command channel: one `/bin/sh` on an SSH session.

Each request is one write to the shell's stdin: the argv, every element single-quoted, run in a
subshell with `</dev/null`, then a per-request random marker printed on stdout (with the exit
status) and on stderr. Output is read up to the markers, counted, and kept up to a cap. Only POSIX
sh and printf are needed on the DUT (busybox ash is enough). Nothing here knows about connecting.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import asyncssh

READ_CHUNK = 65536
T = TypeVar("T")
U = TypeVar("U")


class ChannelBroken(Exception):
    """The shell's stream ended before the request's marker: the channel cannot be reused."""


def quote(arg: str) -> str:
    """`shlex.quote`, but never bare: a bare `if`, `{` or `a=b` would be syntax, not an argument."""
    if "\0" in arg:
        raise ValueError(f"argv element {arg!r} contains a NUL byte, which no command line can carry")
    quoted = shlex.quote(arg)
    return quoted if quoted.startswith("'") else f"'{quoted}'"


def command_line(argv: Sequence[str]) -> str:
    """The argv as one sh command line; every element quoted, so the shell runs argv[0] literally."""
    if isinstance(argv, str) or not argv:
        raise ValueError(f"argv must be a non-empty sequence of strings, got {argv!r}")
    if not all(isinstance(a, str) for a in argv):
        raise ValueError(f"argv elements must be str, got {argv!r}")
    return " ".join(quote(a) for a in argv)


@dataclass
class Capture:
    """One output stream of one request: the first `cap` bytes, and how many there were in all."""

    cap: int
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.kept)

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


async def read_to_eof(stream: asyncssh.SSHReader[bytes], capture: Capture) -> None:
    """Copy a stream into `capture` until EOF (a plain exec's output)."""
    while chunk := await stream.read(READ_CHUNK):
        capture.add(chunk)


async def read_to_marker(stream: asyncssh.SSHReader[bytes], marker: bytes, capture: Capture) -> bytes:
    """Copy a stream into `capture` up to `marker`; returns what follows the marker up to a newline."""
    hold = len(marker) - 1  # a marker may be split across chunks: never commit its possible start
    buf = b""
    while True:
        chunk = await stream.read(READ_CHUNK)
        if not chunk:
            raise ChannelBroken("the shell's output ended before the request's end marker")
        buf += chunk
        at = buf.find(marker)
        if at >= 0:
            capture.add(buf[:at])
            rest = buf[at + len(marker):]
            break
        if len(buf) > hold:
            capture.add(buf[:-hold])
            buf = buf[-hold:]
    while b"\n" not in rest:
        chunk = await stream.read(READ_CHUNK)
        if not chunk:
            raise ChannelBroken("the shell's output ended inside the request's end marker")
        rest += chunk
    return rest.partition(b"\n")[0]  # anything after it is a stray background writer's: dropped


async def both(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """Await two reads together; if one fails, the other is cancelled (no orphan task)."""
    tasks = [asyncio.ensure_future(first), asyncio.ensure_future(second)]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
    errors = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
    if errors:
        raise errors[0]
    return tasks[0].result(), tasks[1].result()


class ShellChannel:
    """A long-lived `/bin/sh` on one SSH session; one request at a time (the caller serialises)."""

    def __init__(self, process: asyncssh.SSHClientProcess[bytes]):
        self.process = process

    @classmethod
    async def open(cls, conn: asyncssh.SSHClientConnection) -> ShellChannel:
        """Start the shell (a session without a command or pty runs the login shell)."""
        return cls(await conn.create_process(None, encoding=None))

    @property
    def usable(self) -> bool:
        return not self.process.is_closing() and self.process.exit_status is None

    async def request(self, argv: Sequence[str], cap: int) -> tuple[int, Capture, Capture]:
        """Run argv once; returns (exit status, stdout, stderr). Raises ChannelBroken."""
        line = command_line(argv)
        token = secrets.token_hex(16)
        marker = f"\x1flw{token}\x1f".encode()
        # printf's format spells the marker's \x1f bytes as octal escapes: the marker itself never
        # appears in the shell's input, so a command that dumps its parent's stdin cannot forge it.
        fmt = f"\\037lw{token}\\037"
        script = (f"( {line} ) </dev/null; printf '{fmt}%d\\n' \"$?\"; "
                  f"printf '{fmt}\\n' >&2\n")
        out, err = Capture(cap), Capture(cap)
        try:
            self.process.stdin.write(script.encode())
            status, _ = await both(read_to_marker(self.process.stdout, marker, out),
                                   read_to_marker(self.process.stderr, marker, err))
        except (asyncssh.Error, ConnectionError, BrokenPipeError) as exc:
            raise ChannelBroken(f"the channel failed: {exc}") from exc
        try:
            return int(status), out, err
        except ValueError as exc:
            raise ChannelBroken(f"bad exit status after the end marker: {status[:40]!r}") from exc

    def close(self) -> None:
        """Close the session; the DUT's sshd hangs up the shell and whatever it still runs."""
        self.process.close()
