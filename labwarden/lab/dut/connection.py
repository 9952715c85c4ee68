"""The one asyncssh connection to a DUT: host key pinned, opened on demand, reopened with backoff.

An unknown or changed host key and a refused client key are never retried (HostKeyMismatch,
AuthRefused); a refused or silent port is retried with exponential backoff, then Unreachable.
The agent and ~/.ssh/config are never consulted: the lab profile says everything.
"""

from __future__ import annotations

import asyncio
import time

import asyncssh

from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.dut.errors import AuthRefused, DeviceError, HostKeyMismatch, Unreachable

CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
           "aes128-ctr", "aes256-ctr")
"""Preference order: AES-GCM costs asyncssh least per packet; dropbear falls back to ctr/chacha."""


def pinned_known_hosts(endpoint: SshEndpoint) -> asyncssh.SSHKnownHosts | None:
    """The pinned key as a known_hosts object; None means 'read endpoint.known_hosts at connect'."""
    if endpoint.host_key is None:
        if endpoint.known_hosts is None:
            raise DeviceError(f"no host key pinned for {endpoint.host}:{endpoint.port}",
                              "set host_key (or known_hosts) in [dut.ssh] of the lab profile; "
                              "unknown host keys are never accepted")
        return None
    fields = endpoint.host_key.split()
    try:
        asyncssh.import_public_key(" ".join(fields[:2]))
    except (asyncssh.KeyImportError, ValueError, IndexError) as exc:
        raise DeviceError(f"host_key for {endpoint.host}:{endpoint.port} is not a public key: {exc}",
                          "set [dut.ssh] host_key to one line like 'ssh-ed25519 AAAA...' "
                          "(`ssh-keyscan -p PORT HOST` from a trusted network shows it)") from exc
    pattern = endpoint.host if endpoint.port == 22 else f"[{endpoint.host}]:{endpoint.port}"
    return asyncssh.import_known_hosts(f"{pattern} {fields[0]} {fields[1]}\n")


class Connection:
    """One pinned-key SSH connection to `endpoint`; the sessions on it (channel, SFTP) belong to
    their users, who notice a new connection by its identity (`current`)."""

    def __init__(self, endpoint: SshEndpoint, *, connect_timeout: float, retries: int,
                 remedy: str | None = None):
        """`retries` is the number of connection attempts before Unreachable (at least one);
        `remedy` is what Unreachable tells to do (the lab's kind knows: lab/reach.py)."""
        self.endpoint = endpoint
        self.remedy = remedy or ("is the DUT up? check [dut.ssh] host/port in the lab profile")
        self.connect_timeout = connect_timeout
        self.retries = max(1, retries)
        self.addr = f"{endpoint.host}:{endpoint.port}"
        self.current: asyncssh.SSHClientConnection | None = None
        """The connection while open (or closed under us and not yet replaced); None before."""
        self._known = pinned_known_hosts(endpoint)  # a bad pin fails here, before any connect
        self._lock = asyncio.Lock()

    @property
    def gone(self) -> bool:
        """No open connection: never opened, closed, or dropped by the DUT or the network."""
        return self.current is None or self.current.is_closed()

    async def ensure(self, tries: int | None = None,
                     connect_timeout: float | None = None) -> asyncssh.SSHClientConnection:
        """The open connection; if there is none, connect (up to `tries` attempts, default
        `retries`, waiting 0.25 s, 0.5 s, ... at most 5 s between them)."""
        tries = self.retries if tries is None else tries
        connect_timeout = self.connect_timeout if connect_timeout is None else connect_timeout
        async with self._lock:
            if self.current is not None and not self.current.is_closed():
                return self.current
            self._drop()
            t0, delay = time.monotonic(), 0.25
            for attempt in range(1, tries + 1):
                try:
                    self.current = await self._connect_once(connect_timeout)
                    return self.current
                except (OSError, asyncssh.DisconnectError) as exc:  # TimeoutError is an OSError
                    if isinstance(exc, asyncssh.HostKeyNotVerifiable | asyncssh.PermissionDenied):
                        raise self._refusal(exc) from exc
                    if attempt == tries:
                        raise self._unreachable(exc, tries, time.monotonic() - t0) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        """Close the connection and wait until it is closed (idempotent)."""
        async with self._lock:
            conn = self.current
            self._drop()
            if conn is not None:
                await conn.wait_closed()

    def _drop(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    async def _connect_once(self, connect_timeout: float) -> asyncssh.SSHClientConnection:
        e = self.endpoint
        try:
            key = asyncssh.read_private_key(e.key)
        except (OSError, asyncssh.KeyImportError) as exc:
            raise AuthRefused(f"cannot load the client key {e.key}: {exc}",
                              "set [dut.ssh] key in the lab profile to a readable, unencrypted private "
                              "key file (the ssh agent is not used)") from exc
        try:
            known = self._known if self._known is not None else asyncssh.read_known_hosts(
                str(e.known_hosts))
        except (OSError, ValueError) as exc:
            raise HostKeyMismatch(f"cannot read known_hosts {e.known_hosts}: {exc}",
                                  "fix [dut.ssh] known_hosts in the lab profile, or pin host_key "
                                  "instead") from exc
        return await asyncssh.connect(
            e.host, e.port, username=e.user, client_keys=[key], known_hosts=known,
            agent_path=None, config=None, preferred_auth="publickey", encryption_algs=list(CIPHERS),
            connect_timeout=connect_timeout, keepalive_interval=10, keepalive_count_max=3)

    def _refusal(self, exc: Exception) -> DeviceError:
        e = self.endpoint
        if isinstance(exc, asyncssh.HostKeyNotVerifiable):
            pinned = (f"pinned key {e.host_key.split()[0]} {e.host_key.split()[1][-12:]}" if e.host_key
                      else f"known_hosts {e.known_hosts}")
            return HostKeyMismatch(
                f"the host key of {self.addr} is not the pinned one ({pinned}): {exc.reason}",
                "if the DUT was reflashed or its keys regenerated, re-pin it: update host_key in "
                f"[dut.ssh] of the lab profile (`ssh-keyscan -p {e.port} {e.host}` from a trusted "
                "network shows the new key); otherwise another machine answers there: do not connect")
        return AuthRefused(
            f"{e.user}@{self.addr} refused the client key {e.key}",
            f"add {e.key}.pub to the DUT's authorized keys (/etc/dropbear/authorized_keys on "
            "OpenWrt), or set [dut.ssh] key/user in the lab profile to a key it accepts")

    def _unreachable(self, exc: Exception, tries: int, elapsed: float) -> Unreachable:
        if isinstance(exc, ConnectionRefusedError):
            why = "refused the connection"
        elif isinstance(exc, TimeoutError):
            why = f"did not answer within {self.connect_timeout:g} s"
        elif isinstance(exc, asyncssh.DisconnectError):
            why = f"dropped the SSH handshake ({exc.reason})"
        else:
            why = f"could not be reached ({exc})"
        return Unreachable(f"{self.addr} {why} ({tries} tries over {elapsed:.1f} s)", self.remedy)
