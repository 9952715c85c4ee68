"""Commands in the qlab guest over SSH (dropbear, host key pinned), for the qlab's own host side:
bring-up checks, the bench and the tests. labwarden's tools reach the DUT through lab/dut, like
any DUT's; this is the bench technician's cable."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Sequence
from pathlib import Path

import asyncssh
from pydantic import BaseModel

from labwarden.lab.dut.connection import pinned_known_hosts
from labwarden.lab.dut.endpoint import SshEndpoint

CONNECT_TIMEOUT_S = 30.0
"""One connect's limit (TCP, key exchange, auth). dropbear answers while boot.d still brings up
the radios, hostapd and the firmware on the guest's vCPUs; in CI (f171cee) a 10 s connect timed
out in the sysupgrade test, cause unknown: this and one more try are the margin."""
CONNECT_TRIES = 2
"""Connects tried when one times out: nothing has run in the guest yet, so another is safe."""


class GuestResult(BaseModel):
    argv: list[str]
    exit_status: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


async def run(endpoint: SshEndpoint, argv: Sequence[str], timeout: float = 120,
              connect_timeout: float = CONNECT_TIMEOUT_S,
              connect_tries: int = CONNECT_TRIES) -> GuestResult:
    """Run `argv` (quoted for the guest's ash) and return what it printed; `connect_tries`
    connects when one times out."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    async with await _connected(endpoint, connect_timeout, connect_tries) as conn:
        res = await asyncio.wait_for(conn.run(shlex.join(argv), check=False), timeout)
    return GuestResult(argv=list(argv), exit_status=res.exit_status if res.exit_status is not None else -1,
                       stdout=str(res.stdout or ""), stderr=str(res.stderr or ""),
                       seconds=round(loop.time() - t0, 3))


async def _connected(endpoint: SshEndpoint, connect_timeout: float = CONNECT_TIMEOUT_S,
                     tries: int = CONNECT_TRIES) -> asyncssh.SSHClientConnection:
    """asyncssh.connect with the pinned host key, the profile's key and nothing from ~/.ssh;
    `tries` attempts when one times out (a refused or failed one is raised at once)."""

    async def connect() -> asyncssh.SSHClientConnection:
        return await asyncssh.connect(endpoint.host, port=endpoint.port, username=endpoint.user,
                                      client_keys=[endpoint.key],
                                      known_hosts=pinned_known_hosts(endpoint), agent_path=None,
                                      config=[], connect_timeout=connect_timeout)

    for _ in range(tries - 1):
        with contextlib.suppress(TimeoutError, asyncssh.ConnectionLost):
            return await connect()
    return await connect()


async def put(endpoint: SshEndpoint, local: Path, remote: str, timeout: float = 120) -> None:
    """Copy a host file to the guest (SFTP: dropbear runs OpenSSH's sftp-server)."""
    conn = await _connected(endpoint)
    async with conn, conn.start_sftp_client() as sftp:
        await asyncio.wait_for(sftp.put(str(local), remote), timeout)


def run_sync(endpoint: SshEndpoint, argv: Sequence[str], timeout: float = 120) -> GuestResult:
    return asyncio.run(run(endpoint, argv, timeout))


def put_sync(endpoint: SshEndpoint, local: Path, remote: str, timeout: float = 120) -> None:
    asyncio.run(put(endpoint, local, remote, timeout))
