"""Device: the only way tools talk to a DUT -- one pinned-key asyncssh connection per DUT.

Commands go through a persistent `/bin/sh` channel (labwarden/lab/shchannel.py; ~1 ms warm round
trip) or a fresh SSH exec; files through SFTP. The host key is always pinned: an unknown or changed
key is refused and never retried. Every failure is a DeviceError whose `remedy` names the fix.
Interface: labwarden/lab/DEVICE_CONTRACT.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import shlex
import signal as _signal
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType

import asyncssh
from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.lab.dut.channel import Capture, ChannelBroken, ShellChannel, both, command_line, read_to_eof
from labwarden.lab.dut.endpoint import SshEndpoint

SIGNALS = ("STOP", "CONT", "TERM", "KILL", "HUP", "INT", "USR1", "USR2")
"""The only signal names `Device.signal` sends."""

_PIDOF = ('for d in /proc/[0-9]*; do { IFS= read -r c <"$d/comm"; } 2>/dev/null '
          '&& [ "x$c" = "x$1" ] && [ "${d#/proc/}" != "$$" ] && echo "${d#/proc/}"; done; exit 0')
"""Constant script for pidof; the name arrives as $1, never inside the script text."""

CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
           "aes128-ctr", "aes256-ctr")
"""Preference order: AES-GCM costs asyncssh least per packet; dropbear falls back to ctr/chacha."""


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


class DeviceError(LabError):
    """A DUT failure: what went wrong (`problem`) and what to do about it (`remedy`)."""

    kind = "device"


class Unreachable(DeviceError):
    """Connecting was refused or timed out on every try."""


class HostKeyMismatch(DeviceError):
    """The DUT presented a key other than the pinned one; never retried."""


class AuthRefused(DeviceError):
    """The DUT refused the client key (or the key could not be loaded); never retried."""


class CommandTimeout(DeviceError):
    """A command outlived its timeout; its channel was closed (the DUT hung it up)."""


class ConnectionLost(DeviceError):
    """The connection or channel broke while a request was in flight; it may or may not have run."""


class CommandFailed(DeviceError):
    """A command exited non-zero where success was required (`check=True`, `signal`)."""


class RemoteFileError(DeviceError):
    """A file operation on the DUT failed (missing, too large, permission, checksum)."""


def _known_hosts(target: SshEndpoint) -> asyncssh.SSHKnownHosts | None:
    """The pinned key as a known_hosts object; None means 'read target.known_hosts at connect'."""
    if target.host_key is None:
        if target.known_hosts is None:
            raise DeviceError(f"no host key pinned for {target.host}:{target.port}",
                              "set host_key (or known_hosts) in [dut.ssh] of the lab profile; "
                              "unknown host keys are never accepted")
        return None
    fields = target.host_key.split()
    try:
        asyncssh.import_public_key(" ".join(fields[:2]))
    except (asyncssh.KeyImportError, ValueError, IndexError) as exc:
        raise DeviceError(f"host_key for {target.host}:{target.port} is not a public key: {exc}",
                          "set [dut.ssh] host_key to one line like 'ssh-ed25519 AAAA...' "
                          "(`ssh-keyscan -p PORT HOST` from a trusted network shows it)") from exc
    pattern = target.host if target.port == 22 else f"[{target.host}]:{target.port}"
    return asyncssh.import_known_hosts(f"{pattern} {fields[0]} {fields[1]}\n")


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


class Device:
    """One DUT over SSH: a pinned-key connection, reconnected with backoff when it drops."""

    def __init__(self, target: SshEndpoint, *, connect_timeout: float = 10, retries: int = 3):
        """`retries` is the number of connection attempts before Unreachable (at least one)."""
        self.target = target
        self.connect_timeout = connect_timeout
        self.retries = max(1, retries)
        self.addr = f"{target.host}:{target.port}"
        self._known = _known_hosts(target)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._channel: ShellChannel | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._conn_lock = asyncio.Lock()
        self._run_lock = asyncio.Lock()

    # -- connection ---------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect unless connected; after a drop, reconnect with exponential backoff."""
        await self._ensure(self.retries, self.connect_timeout)

    async def _ensure(self, tries: int, connect_timeout: float) -> asyncssh.SSHClientConnection:
        async with self._conn_lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            self._drop_connection()
            t0, delay = time.monotonic(), 0.25
            for attempt in range(1, tries + 1):
                try:
                    self._conn = await self._connect_once(connect_timeout)
                    return self._conn
                except (OSError, asyncssh.DisconnectError) as exc:  # TimeoutError is an OSError
                    if isinstance(exc, asyncssh.HostKeyNotVerifiable | asyncssh.PermissionDenied):
                        raise self._refusal(exc) from exc
                    if attempt == tries:
                        raise self._unreachable(exc, tries, time.monotonic() - t0) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connect_once(self, connect_timeout: float) -> asyncssh.SSHClientConnection:
        t = self.target
        try:
            key = asyncssh.read_private_key(t.key)
        except (OSError, asyncssh.KeyImportError) as exc:
            raise AuthRefused(f"cannot load the client key {t.key}: {exc}",
                              "set [dut.ssh] key in the lab profile to a readable, unencrypted private "
                              "key file (the ssh agent is not used)") from exc
        try:
            known = self._known if self._known is not None else asyncssh.read_known_hosts(
                str(t.known_hosts))
        except (OSError, ValueError) as exc:
            raise HostKeyMismatch(f"cannot read known_hosts {t.known_hosts}: {exc}",
                                  "fix [dut.ssh] known_hosts in the lab profile, or pin host_key "
                                  "instead") from exc
        return await asyncssh.connect(
            t.host, t.port, username=t.user, client_keys=[key], known_hosts=known,
            agent_path=None, config=None, preferred_auth="publickey", encryption_algs=list(CIPHERS),
            connect_timeout=connect_timeout, keepalive_interval=10, keepalive_count_max=3)

    def _refusal(self, exc: Exception) -> DeviceError:
        t = self.target
        if isinstance(exc, asyncssh.HostKeyNotVerifiable):
            pinned = (f"pinned key {t.host_key.split()[0]} {t.host_key.split()[1][-12:]}" if t.host_key
                      else f"known_hosts {t.known_hosts}")
            return HostKeyMismatch(
                f"the host key of {self.addr} is not the pinned one ({pinned}): {exc.reason}",
                "if the DUT was reflashed or its keys regenerated, re-pin it: update host_key in "
                f"[dut.ssh] of the lab profile (`ssh-keyscan -p {t.port} {t.host}` from a trusted "
                "network shows the new key); otherwise another machine answers there: do not connect")
        return AuthRefused(
            f"{t.user}@{self.addr} refused the client key {t.key}",
            f"add {t.key}.pub to the DUT's authorized keys (/etc/dropbear/authorized_keys on "
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
        return Unreachable(f"{self.addr} {why} ({tries} tries over {elapsed:.1f} s)",
                           "is the DUT up? `labwarden vlab status`; check [dut.ssh] host/port in the "
                           "lab profile")

    def _drop_connection(self) -> None:
        self._drop_channel()
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _drop_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    async def close(self) -> None:
        """Close the channel, SFTP and the connection (idempotent)."""
        async with self._conn_lock:
            conn = self._conn
            self._drop_connection()
            if conn is not None:
                await conn.wait_closed()

    async def __aenter__(self) -> Device:
        await self.connect()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # -- commands -----------------------------------------------------------------------------

    async def run(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536,
                  check: bool = False) -> RunResult:
        """Run argv on the persistent channel (literally: no shell parses it); serialised."""
        command_line(argv)  # validate before touching the DUT
        _check_limits(timeout, cap)
        conn = await self._ensure(self.retries, self.connect_timeout)
        async with self._run_lock:
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(timeout):
                    if self._channel is None or not self._channel.usable:
                        self._drop_channel()
                        self._channel = await ShellChannel.open(conn)
                    status, out, err = await self._channel.request(argv, cap)
            except TimeoutError as exc:
                self._drop_channel()
                raise self._timeout(argv, timeout, "its channel was closed") from exc
            except (ChannelBroken, asyncssh.Error, OSError) as exc:
                self._drop_channel()
                raise self._lost(argv, exc) from exc
            except asyncio.CancelledError:  # a half-read reply must not leak into the next request
                self._drop_channel()
                raise
        result = _result(argv, status, out, err, t0)
        if check and status != 0:
            raise CommandFailed(f"`{_describe(argv)}` exited {status} on {self.addr}: "
                                f"{result.stderr.strip()[-300:]}",
                                "see stderr above; run it with check=False to inspect the result")
        return result

    async def exec(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536) -> RunResult:
        """Run argv as a fresh SSH exec (for long or background work); stdin is empty."""
        line = command_line(argv)
        _check_limits(timeout, cap)
        conn = await self._ensure(self.retries, self.connect_timeout)
        out, err = Capture(cap), Capture(cap)
        t0 = time.monotonic()
        proc: asyncssh.SSHClientProcess[bytes] | None = None
        try:
            async with asyncio.timeout(timeout):
                proc = await conn.create_process(line, encoding=None)
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
            raise self._lost(argv, exc) from exc
        except asyncio.CancelledError:
            if proc is not None:
                proc.close()
            raise
        if proc.exit_status is not None:
            status = proc.exit_status
        elif proc.exit_signal is not None:
            status = 128 + getattr(_signal, f"SIG{proc.exit_signal[0]}", 0)
        else:
            raise self._lost(argv, ChannelBroken("the session closed without an exit status"))
        return _result(argv, status, out, err, t0)

    def _timeout(self, argv: Sequence[str], timeout: float, what: str) -> CommandTimeout:
        return CommandTimeout(
            f"`{_describe(argv)}` did not finish within {timeout:g} s on {self.addr}; {what} "
            "(the DUT's sshd hung the command up with SIGHUP)",
            "pass a larger timeout=, or start long work with Device.exec; the next call opens a "
            "fresh channel")

    def _lost(self, argv: Sequence[str], exc: Exception) -> ConnectionLost:
        gone = self._conn is None or self._conn.is_closed()
        where = "the connection" if gone else "the command channel"
        return ConnectionLost(
            f"{where} to {self.addr} broke during `{_describe(argv)}`: {exc}; it may or may not "
            "have run",
            "the DUT may be rebooting: `await device.wait_reachable(60)`, then check its effect "
            "before retrying" if gone else
            "the next call opens a fresh channel; check whether the command kills its parent shell")

    # -- files --------------------------------------------------------------------------------

    async def _sftp_client(self) -> asyncssh.SFTPClient:
        conn = await self._ensure(self.retries, self.connect_timeout)
        async with self._conn_lock:
            if self._sftp is None:
                try:
                    self._sftp = await conn.start_sftp_client()
                except (asyncssh.Error, OSError) as exc:
                    raise RemoteFileError(f"{self.addr} offers no SFTP: {exc}",
                                          "install an SFTP server on the DUT (`opkg install "
                                          "openssh-sftp-server` on OpenWrt)") from exc
            return self._sftp

    @contextlib.asynccontextmanager
    async def _files(self, what: str) -> AsyncIterator[asyncssh.SFTPClient]:
        """An SFTP client, with SFTP failures turned into DeviceErrors naming `what`."""
        sftp = await self._sftp_client()
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
            if self._conn is not None and self._conn.is_closed():
                self._sftp = None
            raise ConnectionLost(f"{what} on {self.addr} broke: {exc}",
                                 "the DUT may be rebooting: `await device.wait_reachable(60)` "
                                 "and retry") from exc

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
        res = await self.run(["sha256sum", "--", *paths], cap=cap)
        if res.exit_status not in (0, 1):
            raise CommandFailed(f"sha256sum on {self.addr} exited {res.exit_status}: "
                                f"{res.stderr.strip()[-300:]}",
                                "the DUT needs sha256sum in PATH (busybox provides it)")
        return _parse_sha256sum(res.stdout, paths)

    # -- processes ----------------------------------------------------------------------------

    async def pidof(self, name: str) -> list[int]:
        """Pids whose /proc/PID/comm equals name (the kernel keeps only its first 15 bytes)."""
        if not name or any(c in name for c in "/\n\0"):
            raise ValueError(f"name must be a process name (no '/', newline or NUL), got {name!r}")
        comm = name.encode()[:15].decode(errors="ignore")
        res = await self.run(["sh", "-c", _PIDOF, "sh", comm], check=True)
        return sorted(int(p) for p in res.stdout.split())

    async def signal(self, pid: int, sig: str) -> None:
        """`kill -SIG pid`; sig must be one of SIGNALS and pid > 1."""
        if sig not in SIGNALS:
            raise ValueError(f"sig must be one of {', '.join(SIGNALS)}; got {sig!r}")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
            raise ValueError(f"pid must be an int > 1; got {pid!r}")
        res = await self.run(["kill", f"-{sig}", str(pid)])
        if res.exit_status != 0:
            raise CommandFailed(f"kill -{sig} {pid} on {self.addr} failed: {res.stderr.strip()}",
                                "is the process still there? pids change across restarts: "
                                "look it up again with pidof")

    async def wait_reachable(self, timeout: float) -> None:
        """Poll until the DUT answers a command (after a reboot or flash); Unreachable if not."""
        deadline = time.monotonic() + timeout
        tries, delay = 0, 0.1
        last: DeviceError | None = None
        while True:
            tries += 1
            left = deadline - time.monotonic()
            try:
                await self._ensure(1, max(0.1, min(self.connect_timeout, left)))
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
                                  "`labwarden vlab status` for the vlab") from last
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
