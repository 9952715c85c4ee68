"""Files on a DUT over SFTP: read, write and copy, every write atomic (a temp file beside the
target, renamed over it) and every copy verified by sha256 on both sides.

A temp file is removed when its write fails or is cancelled; the removal is sent before the first
suspension of the clean-up, so it survives an anyio cancel scope (tests/test_device.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import asyncssh

from labwarden.core.devtext import quote
from labwarden.lab.dut.commands import Commands
from labwarden.lab.dut.connection import Connection
from labwarden.lab.dut.errors import CommandFailed, ConnectionLost, RemoteFileError


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _parse_sha256sum(stdout: str, paths: Sequence[str]) -> dict[str, str | None]:
    sums: dict[str, str | None] = dict.fromkeys(paths)
    for line in stdout.splitlines():
        escaped = line.startswith("\\")  # GNU escapes names holding '\\' or newline
        line = line[1:] if escaped else line
        digest, sep, name = line[:64], line[64:66], line[66:]
        if sep not in ("  ", " *"):
            continue
        if escaped:
            name = name.replace("\\n", "\n").replace("\\\\", "\\")
        if name in sums:
            sums[name] = digest
    return sums


class Files:
    """File access to the DUT behind `connection`; owns the SFTP client. Checksums are the DUT's
    own `sha256sum`, run through `commands`."""

    def __init__(self, connection: Connection, commands: Commands):
        self.connection = connection
        self.commands = commands
        self.addr = connection.addr
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_conn: asyncssh.SSHClientConnection | None = None  # the connection it runs on
        self._lock = asyncio.Lock()

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> bytes:
        """A file's bytes (SFTP); RemoteFileError if it is larger than max_bytes."""
        # block_size=0: one read request at a time, until EOF. asyncssh's parallel reader
        # leaves its request tasks running when the read is cancelled (a cancelled tool call
        # polling /proc), and they fail later with SFTPEOFError, outside any caller; files read
        # here are small, and Device.get copies the large ones
        chunks: list[bytes] = []
        size = 0
        async with self._files(f"reading {path}") as sftp, sftp.open(path, "rb", block_size=0) as f:
            while size <= max_bytes:
                chunk: bytes = await f.read(max_bytes + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise RemoteFileError(f"{path} on {self.addr} is larger than max_bytes={max_bytes}",
                                  "pass a larger max_bytes, or copy it with Device.get")
        return data

    async def read_head(self, path: str, n: int) -> bytes:
        """The first `n` bytes of a file (SFTP; fewer when the file is shorter)."""
        chunks: list[bytes] = []
        size = 0
        async with self._files(f"reading {path}") as sftp, sftp.open(path, "rb", block_size=0) as f:
            while size < n:
                chunk: bytes = await f.read(n - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        return b"".join(chunks)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write a file (SFTP) atomically: a temp file beside it, renamed over it."""
        tmp = f"{path}.lw-{secrets.token_hex(4)}.tmp"
        async with self._files(f"writing {path}") as sftp:
            try:
                async with sftp.open(tmp, "wb") as f:
                    await f.write(data)
                with contextlib.suppress(asyncssh.SFTPNoSuchFile):  # keep an existing file's mode
                    mode = (await sftp.stat(path)).permissions
                    if mode is not None:
                        await sftp.chmod(tmp, mode & 0o7777)
                await sftp.posix_rename(tmp, path)
            except BaseException:
                with contextlib.suppress(asyncssh.Error, OSError):
                    await sftp.remove(tmp)
                raise

    async def put(self, local: Path, remote: str) -> str:
        """Copy a local file to the DUT (SFTP, atomic rename); returns its sha256 as verified there."""
        want = await asyncio.to_thread(_sha256_file, Path(local))
        tmp = f"{remote}.lw-{secrets.token_hex(4)}.tmp"
        async with self._files(f"copying {local} to {remote}") as sftp:
            try:
                await sftp.put(str(local), tmp)
                got = (await self.sha256([tmp]))[tmp]
                if got != want:
                    raise RemoteFileError(f"{remote} on {self.addr} has sha256 {got} after copying, "
                                          f"expected {want}", "check free space on the DUT (`df`) "
                                          "and retry")
                await sftp.posix_rename(tmp, remote)
            except BaseException:
                with contextlib.suppress(asyncssh.Error, OSError):
                    await sftp.remove(tmp)
                raise
        return want

    async def get(self, remote: str, local: Path) -> str:
        """Copy a DUT file here (SFTP); returns its sha256, verified against the DUT's sha256sum."""
        local = Path(local)
        tmp = local.with_name(f"{local.name}.lw-{secrets.token_hex(4)}.tmp")
        try:
            async with self._files(f"copying {remote} to {local}") as sftp:
                await sftp.get(remote, str(tmp))
            want = (await self.sha256([remote]))[remote]
            got = await asyncio.to_thread(_sha256_file, tmp)
            if got != want:
                raise RemoteFileError(f"{remote} on {self.addr} has sha256 {want} but the copy has "
                                      f"{got}", "the file may have changed while copying: retry")
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)
        return got

    async def sha256(self, paths: Sequence[str]) -> dict[str, str | None]:
        """sha256 of each path in one `sha256sum` call; None where a path is missing or unreadable."""
        if isinstance(paths, str):
            raise ValueError(f"paths must be a sequence of paths, got the string {paths!r}")
        if not paths:
            return {}
        if any("\n" in p for p in paths):
            raise ValueError(f"paths must not contain newlines: {list(paths)!r}")
        cap = 1024 + sum(2 * len(p.encode()) + 70 for p in paths)
        res = await self.commands.run(["sha256sum", "--", *paths], cap=cap)
        if res.exit_status not in (0, 1):
            raise CommandFailed(f"sha256sum on {self.addr} exited {res.exit_status}: "
                                f"{quote(res.stderr)}",
                                "the DUT needs sha256sum in PATH (busybox provides it)")
        return _parse_sha256sum(res.stdout, paths)

    def close(self) -> None:
        """End the SFTP session (idempotent); the next file operation starts a new one."""
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = self._sftp_conn = None

    async def _client(self) -> asyncssh.SFTPClient:
        conn = await self.connection.ensure()
        async with self._lock:
            if self._sftp_conn is not None and self._sftp_conn.is_closed():
                self.close()  # its connection dropped: the session went with it
            if self._sftp is None:
                try:
                    self._sftp = await conn.start_sftp_client()
                except (asyncssh.Error, OSError) as exc:
                    raise RemoteFileError(f"{self.addr} offers no SFTP: {exc}",
                                          "install an SFTP server on the DUT (`opkg install "
                                          "openssh-sftp-server` on OpenWrt)") from exc
                self._sftp_conn = conn
            return self._sftp

    @contextlib.asynccontextmanager
    async def _files(self, what: str) -> AsyncIterator[asyncssh.SFTPClient]:
        """An SFTP client, with SFTP failures turned into DeviceErrors naming `what`."""
        sftp = await self._client()
        try:
            yield sftp
        except asyncssh.SFTPNoSuchFile as exc:
            raise RemoteFileError(f"{what} on {self.addr}: no such file ({exc.reason})",
                                  "check the path (lab profile [dut.paths]); `ls` it with "
                                  "Device.run") from exc
        except asyncssh.SFTPError as exc:
            raise RemoteFileError(f"{what} on {self.addr} failed: {exc.reason}",
                                  "check the path and its permissions on the DUT") from exc
        except (asyncssh.Error, OSError) as exc:
            raise ConnectionLost(f"{what} on {self.addr} broke: {exc}",
                                 "the DUT may be rebooting: `await device.wait_reachable(60)` "
                                 "and retry") from exc
