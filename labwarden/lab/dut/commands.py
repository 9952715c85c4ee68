"""Commands on a DUT: argv on the persistent shell channel (the hot path, serialised) or as a
fresh SSH exec, each with a timeout and a cap on kept output; and waiting until the DUT answers.

The channel's wire format is channel.py's; this module decides when a channel is opened, dropped
(on timeout, breakage or cancellation: a half-read reply must never reach the next request) and
which DeviceError a failure becomes.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import signal as _signal
import time
from collections.abc import Mapping, Sequence

import asyncssh
from pydantic import BaseModel, Field

from labwarden.core.devtext import quote
from labwarden.lab.dut.channel import (
    Capture,
    ChannelBroken,
    ShellChannel,
    both,
    command_line,
    env_line,
    read_to_eof,
)
from labwarden.lab.dut.connection import Connection
from labwarden.lab.dut.errors import (
    AuthRefused,
    CommandFailed,
    CommandTimeout,
    ConnectionLost,
    DeviceError,
    HostKeyMismatch,
    Unreachable,
)

log = logging.getLogger(__name__)
OPEN_RETRY_S = (0.25, 0.5, 1.0, 2.0)
"""Pauses before asking again for a refused exec session."""


class RunResult(BaseModel):
    """What one command did on the DUT."""

    argv: list[str]
    exit_status: int = Field(description="exit status; 128+N when killed by signal N")
    stdout: str = Field(description="decoded utf-8 (errors='replace'), at most `cap` bytes of it")
    stderr: str = Field(description="decoded like stdout, capped likewise")
    stdout_bytes: int = Field(description="total bytes the command wrote to stdout (before the cap)")
    stderr_bytes: int = Field(description="total bytes the command wrote to stderr (before the cap)")
    truncated: bool = Field(description="either stream was longer than the cap")
    duration_s: float


def _describe(argv: Sequence[str]) -> str:
    text = shlex.join(argv)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_limits(timeout: float, cap: int) -> None:
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise ValueError(f"cap must be an int >= 0 (bytes kept per stream), got {cap!r}")


def _result(argv: Sequence[str], status: int, out: Capture, err: Capture, t0: float) -> RunResult:
    return RunResult(argv=list(argv), exit_status=status, stdout=out.text(), stderr=err.text(),
                     stdout_bytes=out.total, stderr_bytes=err.total,
                     truncated=out.truncated or err.truncated, duration_s=time.monotonic() - t0)


class Commands:
    """Runs argv on the DUT behind `connection`; owns the persistent channel."""

    def __init__(self, connection: Connection, env: Mapping[str, str] | None = None):
        """`env`: the DUT environment every command gets (the lab profile's `[dut] env`), on the
        channel and on every exec alike; None keeps what the DUT's sshd gives a session."""
        self.connection = connection
        self.addr = connection.addr
        self.env = dict(env or {})
        self._env_prefix = env_line(self.env)  # validated here, before any connect
        self._channel: ShellChannel | None = None  # unusable once its connection closes
        self._lock = asyncio.Lock()
        self.stray: list[str] = []
        """Stray output seen on the command channel (discarded from replies), most recent last."""

    async def run(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536,
                  check: bool = False) -> RunResult:
        """Run argv on the persistent channel (literally: no shell parses it); serialised."""
        command_line(argv)  # validate before touching the DUT
        _check_limits(timeout, cap)
        conn = await self.connection.ensure()
        async with self._lock:
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(timeout):
                    if self._channel is None or not self._channel.usable:
                        self.close()
                        self._channel = await self._open_channel(conn)
                    try:
                        status, out, err = await self._channel.request(argv, cap)
                    finally:
                        self._collect_stray()
            except TimeoutError as exc:
                self.close()
                raise self._timeout(argv, timeout, "its channel was closed") from exc
            except (ChannelBroken, asyncssh.Error, OSError) as exc:
                self.close()
                raise self._lost(argv, exc) from exc
            except asyncio.CancelledError:  # a half-read reply must not leak into the next request
                self.close()
                raise
        result = _result(argv, status, out, err, t0)
        if check and status != 0:
            raise CommandFailed(f"`{_describe(argv)}` exited {status} on {self.addr}: "
                                f"{quote(result.stderr)}",
                                "see stderr above; run it with check=False to inspect the result")
        return result

    async def exec(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536) -> RunResult:
        """Run argv as a fresh SSH exec (for long or background work); stdin is empty."""
        line = command_line(argv)
        if self._env_prefix:  # sshd runs the line with the user's shell -c: no profile, no rc
            line = f"{self._env_prefix}; {line}"
        _check_limits(timeout, cap)
        conn = await self.connection.ensure()
        out, err = Capture(cap), Capture(cap)
        t0 = time.monotonic()
        proc: asyncssh.SSHClientProcess[bytes] | None = None
        try:
            async with asyncio.timeout(timeout):
                proc = await self._open_session(conn, line)
                proc.stdin.write_eof()
                await both(read_to_eof(proc.stdout, out), read_to_eof(proc.stderr, err))
                await proc.wait_closed()
        except TimeoutError as exc:
            if proc is not None:
                proc.close()
            raise self._timeout(argv, timeout, "its session was closed") from exc
        except (asyncssh.Error, OSError) as exc:
            if proc is not None:
                proc.close()
            raise self._lost(argv, exc, session=True) from exc
        except asyncio.CancelledError:
            if proc is not None:
                proc.close()
            raise
        if proc.exit_signal is not None:  # asyncssh then reports exit_status -1
            status = 128 + getattr(_signal, f"SIG{proc.exit_signal[0]}", 0)
        elif proc.exit_status is not None:
            status = proc.exit_status
        else:
            raise self._lost(argv, ChannelBroken("the session closed without an exit status"),
                             session=True)
        return _result(argv, status, out, err, t0)

    async def _open_session(self, conn: asyncssh.SSHClientConnection,
                            line: str) -> asyncssh.SSHClientProcess[bytes]:
        """A new exec session. A refused session ran nothing, so it is asked for again, a few
        times over ~4 s: OpenSSH refuses sessions past MaxSessions (10 per connection) until
        earlier ones end -- and a session whose command still runs counts, even once closed.
        A connection found dead at the open ran nothing either: it is replaced, once."""
        replaced = False
        for delay in OPEN_RETRY_S:
            try:
                return await conn.create_process(line, encoding=None)
            except asyncssh.ChannelOpenError as exc:
                if conn.is_closed() and not replaced:
                    conn, replaced = await self._reopened(exc), True
                    continue
                log.info("the DUT refused an exec session (%s); asking again in %g s",
                         exc.reason, delay)
                await asyncio.sleep(delay)
        return await conn.create_process(line, encoding=None)

    async def _open_channel(self, conn: asyncssh.SSHClientConnection) -> ShellChannel:
        """The command channel, on a new connection (once) if `conn` is found dead at the open."""
        try:
            return await ShellChannel.open(conn, self.env)
        except asyncssh.ChannelOpenError as exc:
            if not conn.is_closed():
                raise
            return await ShellChannel.open(await self._reopened(exc), self.env)

    async def _reopened(self, exc: Exception) -> asyncssh.SSHClientConnection:
        """A new connection in place of one found closed when a session was asked for on it:
        closed between `ensure()` and the open, so nothing of this request reached the DUT. One
        server does this unasked: dropbear from 2022.83 (Debian 12's) until its fix of October
        2024 (mkj/dropbear#321, PR #326) exits on a failed assertion when a session opens as
        another one's process exits, taking every session of the connection with it.
        Only once per request: a second dead connection is the DUT going away."""
        log.warning("the connection to %s closed under a new session (%s); reconnecting",
                    self.addr, exc)
        return await self.connection.ensure()

    async def wait_reachable(self, timeout: float) -> None:
        """Poll until the DUT answers a command (after a reboot or flash); Unreachable if not."""
        deadline = time.monotonic() + timeout
        tries, delay = 0, 0.1
        last: DeviceError | None = None
        while True:
            tries += 1
            left = deadline - time.monotonic()
            try:
                await self.connection.ensure(1, max(0.1, min(self.connection.connect_timeout, left)))
                await self.run(["true"], timeout=max(0.1, min(10.0, left)))
                return
            except (HostKeyMismatch, AuthRefused):
                raise
            except DeviceError as exc:
                last = exc
            if time.monotonic() + delay > deadline:
                raise Unreachable(f"{self.addr} did not answer a command within {timeout:g} s "
                                  f"({tries} tries); last: {last.problem}",
                                  "is the DUT still booting? wait longer, or check its console; "
                                  + self.connection.remedy) from last
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _collect_stray(self) -> None:
        if self._channel is not None and self._channel.stray:
            self.stray = (self.stray + self._channel.stray)[-10:]
            self._channel.stray.clear()

    def close(self) -> None:
        """Close the channel; the next run opens a fresh one. A command it was running is not
        stopped by this (OpenSSH and dropbear hang up only sessions with a terminal): long work
        runs as a stoppable job (jobs.py)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _timeout(self, argv: Sequence[str], timeout: float, what: str) -> CommandTimeout:
        return CommandTimeout(
            f"`{_describe(argv)}` did not finish within {timeout:g} s on {self.addr}; {what} "
            "(the command itself may still run on the DUT: sshd hangs up only sessions with a "
            "terminal)",
            "pass a larger timeout=, or start long work with Device.exec; the next call opens a "
            "fresh channel")

    def _lost(self, argv: Sequence[str], exc: Exception, *, session: bool = False) -> ConnectionLost:
        """`session`: the command ran in an exec session of its own, not on the command channel."""
        gone = self.connection.gone
        where = ("the connection" if gone else "the exec session" if session
                 else "the command channel")
        return ConnectionLost(
            f"{where} to {self.addr} broke during `{_describe(argv)}`: {type(exc).__name__}: "
            f"{exc}; it may or may not have run",
            "the DUT may be rebooting: `await device.wait_reachable(60)`, then check its effect "
            "before retrying" if gone else
            "the next call opens a fresh session; the DUT's sshd log may say why it ended it"
            if session else
            "the next call opens a fresh channel; check whether the command kills its parent shell")
