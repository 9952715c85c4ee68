"""The wire format of Device's persistent command channel: one `/bin/sh` on an SSH session.

The session asks for a command (`exec /bin/sh -s`), so the DUT's sshd runs the user's shell with
`-c`, never as a login shell: /etc/profile (OpenWrt's prints /etc/banner and resets PATH) does
not run. The profile's environment is exported once when the channel opens.

Each request is one write to the shell's stdin: a per-request random start marker printed on
stdout and stderr, the argv (every element single-quoted) run in a subshell with `</dev/null`,
then an end marker (with the exit status on stdout). Output is read between the markers,
counted, and kept up to a cap. Anything before a start marker -- what a login shell, an rc file
or a stray background writer printed -- is never part of a reply: it is discarded and reported
(`ShellChannel.stray`). Only POSIX sh and printf are needed on the DUT (busybox ash is enough).
Nothing here knows about connecting.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import shlex
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncssh

log = logging.getLogger(__name__)
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


class MarkedStream:
    """One output stream of the shell, read marker by marker; bytes read past a marker are kept
    for the next read."""

    def __init__(self, stream: asyncssh.SSHReader[bytes]):
        self.stream = stream
        self.buf = b""

    async def _more(self, what: str) -> None:
        chunk = await self.stream.read(READ_CHUNK)
        if not chunk:
            raise ChannelBroken(f"the shell's output ended {what}")
        self.buf += chunk

    async def until(self, marker: bytes, capture: Capture) -> None:
        """Copy into `capture` up to `marker`, and consume the marker."""
        hold = len(marker) - 1  # a marker may be split across chunks: never commit its possible start
        while True:
            at = self.buf.find(marker)
            if at >= 0:
                capture.add(self.buf[:at])
                self.buf = self.buf[at + len(marker):]
                return
            if len(self.buf) > hold:
                capture.add(self.buf[:-hold])
                self.buf = self.buf[-hold:]
            await self._more("before the request's marker")

    async def line(self) -> bytes:
        """The rest of the line (what the end marker carries: the exit status)."""
        while b"\n" not in self.buf:
            await self._more("inside the request's end marker")
        head, _, self.buf = self.buf.partition(b"\n")
        return head


async def both(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """Await two reads together; if one fails, the other is cancelled (no orphan task)."""
    one, two = asyncio.ensure_future(first), asyncio.ensure_future(second)
    tasks: list[asyncio.Future[Any]] = [one, two]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
    errors = [e for t in tasks if t.done() and not t.cancelled() and (e := t.exception())]
    if errors:
        raise errors[0]
    return one.result(), two.result()


STRAY_KEPT = 512
"""Bytes of stray output kept per report (the rest is only counted)."""


def env_line(env: Mapping[str, str]) -> str:
    """`export K='v' ...` for the profile's DUT environment ('' when there is none)."""
    for key in env:
        if not _ENV_NAME.fullmatch(key):
            raise ValueError(f"environment name {key!r} is not a shell variable name")
    return "export " + " ".join(f"{k}={quote(v)}" for k, v in env.items()) if env else ""


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SHELL_COMMAND = "exec /bin/sh -s"
"""What the channel's session asks the DUT to run: a plain shell reading stdin. Asking for a
command keeps sshd (OpenSSH, dropbear) from starting a login shell, which would run /etc/profile."""


class ShellChannel:
    """A long-lived `/bin/sh` on one SSH session; one request at a time (the caller serialises)."""

    def __init__(self, process: asyncssh.SSHClientProcess[bytes]):
        self.process = process
        self.out = MarkedStream(process.stdout)
        self.err = MarkedStream(process.stderr)
        self.stray: list[str] = []
        """What arrived outside any reply (a banner, an rc file's chatter), one entry per event;
        never part of a command's output."""

    @classmethod
    async def open(cls, conn: asyncssh.SSHClientConnection,
                   env: Mapping[str, str] | None = None) -> ShellChannel:
        """Start the shell (as a command: no login shell) and export the profile's environment;
        whatever the DUT prints before the first reply is set aside as stray output."""
        channel = cls(await conn.create_process(SHELL_COMMAND, encoding=None))
        setup = env_line(env or {})
        if setup:
            channel.process.stdin.write(f"{setup}\n".encode())
        return channel

    @property
    def usable(self) -> bool:
        return not self.process.is_closing() and self.process.exit_status is None

    async def request(self, argv: Sequence[str], cap: int) -> tuple[int, Capture, Capture]:
        """Run argv once; returns (exit status, stdout, stderr). Raises ChannelBroken."""
        line = command_line(argv)
        token = secrets.token_hex(16)
        start, end = f"\x1flw<{token}\x1f".encode(), f"\x1flw>{token}\x1f".encode()
        # printf's format spells the markers' \x1f bytes as octal escapes: a marker itself never
        # appears in the shell's input, so a command that dumps its parent's stdin cannot forge it.
        s_fmt, e_fmt = f"\\037lw<{token}\\037", f"\\037lw>{token}\\037"
        script = (f"printf '{s_fmt}'; printf '{s_fmt}' >&2; ( {line} ) </dev/null; "
                  f"printf '{e_fmt}%d\\n' \"$?\"; printf '{e_fmt}\\n' >&2\n")
        out, err = Capture(cap), Capture(cap)
        stray_out, stray_err = Capture(STRAY_KEPT), Capture(STRAY_KEPT)
        try:
            self.process.stdin.write(script.encode())
            await both(self.out.until(start, stray_out), self.err.until(start, stray_err))
            self._stray(stray_out, stray_err)
            status, _ = await both(self._reply(self.out, end, out), self._reply(self.err, end, err))
        except (asyncssh.Error, ConnectionError, BrokenPipeError) as exc:
            raise ChannelBroken(f"the channel failed: {exc}") from exc
        try:
            return int(status), out, err
        except ValueError as exc:
            raise ChannelBroken(f"bad exit status after the end marker: {status[:40]!r}") from exc

    @staticmethod
    async def _reply(stream: MarkedStream, end: bytes, capture: Capture) -> bytes:
        await stream.until(end, capture)
        return await stream.line()

    def _stray(self, out: Capture, err: Capture) -> None:
        for name, cap in (("stdout", out), ("stderr", err)):
            if cap.total:
                text = cap.text() + (f" [... {cap.total} bytes in all]" if cap.truncated else "")
                self.stray.append(f"{name}: {text}")
                log.warning("stray output on the DUT's command channel (%s, discarded): %r",
                            name, text[:200])
        del self.stray[:-10]  # the last few are enough to say what happens

    def close(self) -> None:
        """Close the session. Its shell sees end of input and exits; a command it still runs is
        not stopped by this (OpenSSH and dropbear send no SIGHUP without a terminal)."""
        self.process.close()
