"""The DUT's SSH endpoint: asyncssh on 127.0.0.1 with key auth; exec, shell and SFTP.

Commands run as `/bin/sh -c CMD` in the DUT environment, like a real sshd running the user's
shell. When a channel closes, the session's process group gets SIGHUP, as sshd does: DUT-side
helpers (the pause dead-man) rely on that.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from functools import partial
from typing import Any

import asyncssh

from labwarden.vlab.layout import VlabLayout


class _Server(asyncssh.SSHServer):
    def __init__(self, registry: SessionRegistry):
        self.registry = registry
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.registry.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.registry.connections.discard(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True  # always authenticate: public key only

    def password_auth_supported(self) -> bool:
        return False


class SessionRegistry:
    """Live connections and session process groups, so a reboot can drop them all."""

    def __init__(self) -> None:
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.pgids: set[int] = set()

    def drop_all(self) -> None:
        for conn in list(self.connections):
            conn.close()
        for pgid in list(self.pgids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


async def _session(layout: VlabLayout, registry: SessionRegistry,
                   process: asyncssh.SSHServerProcess[bytes]) -> None:
    argv = ["/bin/sh", "-c", process.command] if process.command is not None else ["/bin/sh"]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=layout.dut_env(), cwd=str(layout.root),
        start_new_session=True)
    registry.pgids.add(proc.pid)
    pumps = [asyncio.ensure_future(_pump(proc.stdout, process.stdout)),
             asyncio.ensure_future(_pump(proc.stderr, process.stderr))]
    feeder = asyncio.ensure_future(_feed(process.stdin, proc.stdin))
    closed = asyncio.ensure_future(process.wait_closed())
    try:
        outputs = asyncio.gather(*pumps)
        either: set[asyncio.Future[Any]] = {outputs, closed}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not outputs.done():  # client went away: hang up the session like sshd
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGHUP)
            await proc.wait()
            return
        rc = await proc.wait()
        process.exit(rc if rc >= 0 else 128 - rc)
    finally:
        for task in (feeder, closed, *pumps):
            task.cancel()
        registry.pgids.discard(proc.pid)


async def _pump(src: asyncio.StreamReader | None, dst: asyncssh.SSHWriter[bytes]) -> None:
    """Copy a child's output to the channel until EOF (so exit status never overtakes data).
    Output that arrives after the client went away is read and dropped: a write to the closed
    channel raising would end the pump early, which `_session` takes for the child's EOF -- and
    then it waits for the child instead of hanging it up."""
    assert src is not None
    while chunk := await src.read(65536):
        with contextlib.suppress(asyncssh.Error, ConnectionError, BrokenPipeError):
            dst.write(chunk)
            await dst.drain()


async def _feed(src: asyncssh.SSHReader[bytes], dst: asyncio.StreamWriter | None) -> None:
    assert dst is not None
    try:
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    except (asyncssh.Error, ConnectionError, BrokenPipeError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            dst.close()


async def listen(layout: VlabLayout, port: int, registry: SessionRegistry) -> asyncssh.SSHAcceptor:
    return await asyncssh.listen(
        "127.0.0.1", port,
        server_factory=partial(_Server, registry),
        server_host_keys=[str(layout.host_key)],
        authorized_client_keys=str(layout.authorized_keys),
        process_factory=partial(_session, layout, registry),
        sftp_factory=True, allow_scp=True, encoding=None,
        keepalive_interval=5, keepalive_count_max=3,
    )
