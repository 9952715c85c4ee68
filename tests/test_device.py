"""Device against the real vlab: the persistent channel, exec, SFTP, processes, pinning, reconnect.

The vlab DUT's filesystem and /proc are the host's, so every effect is also checked from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import asyncssh
import pytest

from labwarden.lab.dut.connection import Connection
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.dut.errors import (
    AuthRefused,
    CommandFailed,
    CommandTimeout,
    DeviceError,
    HostKeyMismatch,
    RemoteFileError,
    Unreachable,
)
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout

pytestmark = pytest.mark.anyio



def _endpoint(layout: VlabLayout, **kw: object) -> SshEndpoint:
    fields: dict[str, object] = {
        "host": "127.0.0.1", "port": int(layout.ssh_port_file.read_text()),
        "key": str(layout.client_key),
        "host_key": Path(str(layout.host_key) + ".pub").read_text().strip()}
    fields.update(kw)
    return SshEndpoint.model_validate(fields)


@pytest.fixture
async def dev(vlab: VlabLayout) -> AsyncIterator[Device]:
    async with Device(_endpoint(vlab)) as device:
        yield device


async def _shell_pid(dev: Device) -> int:
    """Pid of the channel's shell: the parent of what a request runs."""
    res = await dev.run(["sh", "-c", 'echo "$PPID"'])
    return int(res.stdout)


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _pids_running(cmdline: list[str]) -> list[int]:
    want = "\0".join(cmdline) + "\0"
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_text() == want:
                    found.append(int(d.name))
            except OSError:
                pass
    return found


# -- commands ---------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["run", "exec"])
async def test_exit_status_stdout_stderr(dev: Device, method: str) -> None:
    t0 = time.monotonic()
    res = await getattr(dev, method)(["sh", "-c", "echo out; echo err-text >&2; exit 7"])
    wall = time.monotonic() - t0
    assert (res.exit_status, res.stdout, res.stderr) == (7, "out\n", "err-text\n")
    assert (res.stdout_bytes, res.stderr_bytes, res.truncated) == (4, 9, False)
    assert res.argv == ["sh", "-c", "echo out; echo err-text >&2; exit 7"]
    assert 0 < res.duration_s <= wall  # the command's own time, inside the call's


async def test_killed_by_signal_is_128_plus_n(dev: Device) -> None:
    for method in (dev.run, dev.exec):
        res = await method(["sh", "-c", "kill -9 $$"])
        assert res.exit_status == 137


HOSTILE = [";touch CANARY", "$(touch CANARY)", "`touch CANARY`", "'; touch CANARY; '",
           '"; touch CANARY; "', "\ntouch CANARY\n", "a\nb\n\n", "--help", "-n", "*", "/*",
           "$HOME ${PATH} $$", "\\", "'", '"', "x' 'y", " spaced  out ", "é ü 日本", "&& touch CANARY &",
           "| touch CANARY", "> CANARY", "#not a comment", "~", "{a,b}", "if", "a=b"]


@pytest.mark.parametrize("method", ["run", "exec"])
async def test_hostile_argv_arrives_literally(dev: Device, vlab: VlabLayout, method: str) -> None:
    canary = vlab.tmp_dir / f"canary-{method}"
    for raw in HOSTILE:
        arg = raw.replace("CANARY", str(canary))
        res = await getattr(dev, method)(["printf", "%s", arg])
        assert res.exit_status == 0, (arg, res.stderr)
        assert res.stdout == arg
        assert res.stdout_bytes == len(arg.encode())
    assert not canary.exists()
    assert not (vlab.root / "CANARY").exists()


@pytest.mark.parametrize("argv, status", [
    (["exit"], 0), (["exit", "3"], 3), (["cd", "/"], 0), (["exec", "true"], 0),
    (["exec", "false"], 1), (["set", "-e"], 0), (["trap", "exit 9", "EXIT"], 9),
    (["exec", "0<&-"], 127), (["if"], 127), (["a=b"], 127), (["ulimit", "-n", "3"], 0)])
async def test_shell_words_as_argv0_cannot_hurt_the_channel(
        dev: Device, vlab: VlabLayout, argv: list[str], status: int) -> None:
    before = await _shell_pid(dev)
    res = await dev.run(argv)
    assert res.exit_status == status, res.stderr
    assert await _shell_pid(dev) == before  # same shell, still answering
    assert (await dev.run(["pwd"])).stdout == f"{vlab.root}\n"  # `cd` stayed in its subshell
    assert (await dev.run(["echo", "ok"])).stdout == "ok\n"


async def test_requests_are_serialised(dev: Device) -> None:
    results = await asyncio.gather(*(dev.run(["printf", "%s", f"req-{i}"]) for i in range(25)))
    assert [r.stdout for r in results] == [f"req-{i}" for i in range(25)]


def _seq(n: int) -> str:
    return "".join(f"{i}\n" for i in range(1, n + 1))


@pytest.mark.parametrize("method", ["run", "exec"])
async def test_cap_and_byte_counts(dev: Device, method: str) -> None:
    out, err = _seq(30000), _seq(7000)
    argv = ["sh", "-c", "seq 1 30000; seq 1 7000 >&2"]
    res = await getattr(dev, method)(argv, cap=1000)
    assert (res.stdout, res.stderr) == (out[:1000], err[:1000])
    assert (res.stdout_bytes, res.stderr_bytes, res.truncated) == (len(out), len(err), True)
    full = await getattr(dev, method)(argv, cap=len(out))
    assert (full.stdout, full.stderr, full.truncated) == (out, err, False)
    none = await getattr(dev, method)(argv, cap=0)
    assert (none.stdout, none.stdout_bytes, none.truncated) == ("", len(out), True)


async def test_large_output_through_the_channel(dev: Device) -> None:
    res = await dev.run(["seq", "1", "400000"], cap=8 << 20)
    assert res.stdout == _seq(400000) and not res.truncated


async def test_timeout_closes_channel_and_next_call_uses_a_fresh_one(dev: Device) -> None:
    before = await _shell_pid(dev)
    # beside it, on a session of its own, an exec given ten times the timeout: the run times out
    # first -- an order, not a time; it fails for a timeout that waits on past ten of itself
    # (for the command to end, for a retry), whatever the host's load
    beside = asyncio.create_task(dev.exec(["sleep", "4243"], timeout=3.0))
    try:
        with pytest.raises(CommandTimeout) as info:
            await dev.run(["sleep", "4242"], timeout=0.3)
        assert not beside.done(), f"a timeout ten times as long ended first: {beside}"
    finally:
        beside.cancel()  # its session is closed: the DUT hangs its sleep up too
        await asyncio.gather(beside, return_exceptions=True)
    assert "sleep 4242" in info.value.problem and "timeout" in info.value.remedy
    res = await dev.run(["echo", "again"])
    assert res.stdout == "again\n"
    assert await _shell_pid(dev) != before
    with anyio.fail_after(5):  # the DUT hung the commands up
        while _pids_running(["sleep", "4242"]) or _pids_running(["sleep", "4243"]):
            await anyio.sleep(0.05)


async def test_cancelled_request_does_not_leak_into_the_next(dev: Device) -> None:
    with anyio.move_on_after(0.3):
        await dev.run(["sh", "-c", "echo early; sleep 4545; echo late"])
    assert (await dev.run(["echo", "next"])).stdout == "next\n"
    with anyio.fail_after(5):
        while _pids_running(["sleep", "4545"]):
            await anyio.sleep(0.05)


async def test_exec_timeout(dev: Device) -> None:
    with pytest.raises(CommandTimeout):
        await dev.exec(["sleep", "4343"], timeout=0.3)
    assert (await dev.exec(["echo", "fine"])).stdout == "fine\n"
    with anyio.fail_after(5):
        while _pids_running(["sleep", "4343"]):
            await anyio.sleep(0.05)


async def test_check_raises_command_failed(dev: Device) -> None:
    with pytest.raises(CommandFailed) as info:
        await dev.run(["sh", "-c", "echo broken-thing >&2; exit 5"], check=True)
    assert "exited 5" in info.value.problem and "broken-thing" in info.value.problem


@pytest.mark.parametrize("argv", [[], "ls -l", ["echo", "nul\0byte"], ["echo", 3]])
async def test_bad_argv_is_refused_before_the_dut(dev: Device, argv: object) -> None:
    with pytest.raises(ValueError, match="argv"):
        await dev.run(argv)  # type: ignore[arg-type]


# -- files ------------------------------------------------------------------------------------

async def test_put_get_verified(dev: Device, vlab: VlabLayout, tmp_path: Path) -> None:
    data = os.urandom(300_000)
    local = tmp_path / "blob"
    local.write_bytes(data)
    remote = vlab.tmp_dir / "blob"
    assert await dev.put(local, str(remote)) == hashlib.sha256(data).hexdigest()
    assert remote.read_bytes() == data
    back = tmp_path / "back"
    assert await dev.get(str(remote), back) == hashlib.sha256(data).hexdigest()
    assert back.read_bytes() == data
    assert not [p for p in [*vlab.tmp_dir.iterdir(), *tmp_path.iterdir()] if ".lw-" in p.name]
    with pytest.raises(RemoteFileError, match="no such file"):
        await dev.get(str(vlab.tmp_dir / "missing"), tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("method", ["put", "write_file"])
async def test_cancelled_copy_leaves_no_temp_file(dev: Device, vlab: VlabLayout, tmp_path: Path,
                                                  method: str) -> None:
    """A copy cancelled the way the MCP server cancels a tool (an anyio scope, which cancels
    every later await too, the clean-up's included) removes its temp file from the DUT. The
    clean-up's `sftp.remove` survives that unshielded: asyncssh sends the request before its
    first suspension, so only the wait for the reply is cancelled. Anything awaited before the
    remove would break that (then shield it, as lab/dut/uprobes.py and sweep do)."""
    data = os.urandom(8 << 20)
    local = tmp_path / "big"
    local.write_bytes(data)
    remote = str(vlab.tmp_dir / f"big-{method}")

    async def copy() -> None:
        await (dev.put(local, remote) if method == "put" else dev.write_file(remote, data))

    def left() -> list[str]:
        return [p.name for p in vlab.tmp_dir.iterdir() if ".lw-" in p.name]

    t0 = time.monotonic()
    await copy()
    full = time.monotonic() - t0
    cancelled = 0
    for share in (0.05, 0.2, 0.4, 0.6):  # cancel at different points of the copy
        with anyio.move_on_after(share * full) as scope:
            await copy()
        cancelled += scope.cancelled_caught
        t0 = time.monotonic()
        while left() and time.monotonic() - t0 < 5:  # the removal may still be in flight
            await asyncio.sleep(0.02)
        assert left() == [], f"temp files left on the DUT after a cancel at {share:.0%} of a copy"
    assert cancelled >= 2, f"only {cancelled} of 4 copies were cancelled before they finished"


async def test_read_write_file(dev: Device, vlab: VlabLayout) -> None:
    path = vlab.tmp_dir / "note.txt"
    await dev.write_file(str(path), b"first\n")
    assert await dev.read_file(str(path)) == b"first\n"
    path.chmod(0o750)
    await dev.write_file(str(path), b"second\x00\xff")
    assert path.read_bytes() == b"second\x00\xff"
    assert path.stat().st_mode & 0o777 == 0o750  # atomic replace kept the mode
    assert not [p for p in vlab.tmp_dir.iterdir() if ".lw-" in p.name]
    with pytest.raises(RemoteFileError, match="max_bytes"):
        await dev.read_file(str(path), max_bytes=3)
    with pytest.raises(RemoteFileError, match="no such file"):
        await dev.read_file(str(vlab.tmp_dir / "nope"))
    assert len((await dev.read_file("/proc/loadavg")).split()) == 5


async def test_sha256_existing_and_missing(dev: Device, vlab: VlabLayout) -> None:
    stad = str(vlab.binary("stad"))
    spaced = vlab.tmp_dir / "with space -x"
    spaced.write_bytes(b"abc")
    missing = str(vlab.tmp_dir / "missing")
    sums = await dev.sha256([stad, missing, str(spaced)])
    assert sums == {stad: hashlib.sha256(vlab.binary("stad").read_bytes()).hexdigest(),
                    missing: None, str(spaced): hashlib.sha256(b"abc").hexdigest()}
    assert await dev.sha256([]) == {}


# -- processes --------------------------------------------------------------------------------

async def test_pidof_stad(dev: Device, vlab: VlabLayout) -> None:
    pids = await dev.pidof("stad")
    # other vlabs may run on this host: ours must be there, and only real stads
    assert int((vlab.run_dir / "stad.pid").read_text()) in pids
    assert all(Path(f"/proc/{p}/comm").read_text() == "stad\n" for p in pids)
    assert await dev.pidof("no-such-proc") == []


async def test_signal_stop_cont(dev: Device) -> None:
    res = await dev.exec(["sh", "-c", "sleep 4444 </dev/null >/dev/null 2>&1 & echo $!"])
    pid = int(res.stdout)
    try:
        await dev.signal(pid, "STOP")
        with anyio.fail_after(5):
            while _proc_state(pid) != "T":
                await anyio.sleep(0.02)
        await dev.signal(pid, "CONT")
        with anyio.fail_after(5):
            while _proc_state(pid) == "T":
                await anyio.sleep(0.02)
        assert _proc_state(pid) in ("S", "R")
        await dev.signal(pid, "KILL")
        with anyio.fail_after(5):
            while _proc_state(pid) not in (None, "Z"):
                await anyio.sleep(0.02)
    finally:
        if _proc_state(pid) is not None:
            os.kill(pid, 9)


@pytest.mark.parametrize("pid, sig, arg", [
    (1, "STOP", "pid"), (0, "STOP", "pid"), (-5, "TERM", "pid"), (True, "TERM", "pid"),
    (12345, "SEGV", "sig"), (12345, "SIGSTOP", "sig"), (12345, "stop", "sig"), (12345, "9", "sig")])
async def test_signal_refuses_outside_the_allowlist(dev: Device, pid: int, sig: str, arg: str) -> None:
    with pytest.raises(ValueError, match=arg):
        await dev.signal(pid, sig)


async def test_signal_to_a_gone_process(dev: Device) -> None:
    res = await dev.exec(["sh", "-c", "true & echo $!; wait"])
    with pytest.raises(CommandFailed) as info:
        await dev.signal(int(res.stdout), "TERM")
    assert "pidof" in info.value.remedy


# -- pinning, auth, reachability --------------------------------------------------------------

async def test_wrong_host_key_is_refused_without_retry(vlab: VlabLayout,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    device = Device(_endpoint(vlab, host_key=impostor), retries=3)
    tries = 0
    connect_once = Connection._connect_once

    async def counted(self: Connection, connect_timeout: float) -> asyncssh.SSHClientConnection:
        nonlocal tries
        tries += 1
        return await connect_once(self, connect_timeout)

    monkeypatch.setattr(Connection, "_connect_once", counted)
    with pytest.raises(HostKeyMismatch) as info:
        await device.connect()
    assert tries == 1  # not retried: a count, not a time (retries=3 would make it three)
    assert "host_key" in info.value.remedy and str(vlab.ssh_port_file.read_text().strip()) in \
        info.value.problem


async def test_known_hosts_file_pins_too(vlab: VlabLayout, tmp_path: Path) -> None:
    async with Device(_endpoint(vlab, host_key=None, known_hosts=str(vlab.known_hosts))) as device:
        assert (await device.run(["echo", "pinned"])).stdout == "pinned\n"
    other = tmp_path / "known_hosts"
    other.write_text(vlab.known_hosts.read_text().replace("[127.0.0.1]", "[127.0.0.2]"))
    with pytest.raises(HostKeyMismatch):
        await Device(_endpoint(vlab, host_key=None, known_hosts=str(other))).connect()


async def test_no_pin_is_refused(vlab: VlabLayout) -> None:
    with pytest.raises(DeviceError, match="no host key pinned"):
        Device(_endpoint(vlab, host_key=None))


async def test_wrong_client_key(vlab: VlabLayout, tmp_path: Path) -> None:
    key = tmp_path / "other_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(key))
    with pytest.raises(AuthRefused) as info:
        await Device(_endpoint(vlab, key=str(key))).connect()
    assert isinstance(info.value, DeviceError)
    assert str(key) in info.value.problem and "authorized keys" in info.value.remedy
    with pytest.raises(AuthRefused, match="cannot load the client key"):
        await Device(_endpoint(vlab, key=str(tmp_path / "absent"))).connect()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_port_fails_quickly(vlab: VlabLayout) -> None:
    port = _free_port()
    device = Device(_endpoint(vlab, port=port), retries=3)
    t0 = time.monotonic()
    with pytest.raises(Unreachable) as info:
        await device.run(["true"])
    # quickly: the three refused tries (and their backoff) ended before one try at a silent
    # port would have timed out -- a relation to the device's own connect timeout, not a number
    # of seconds; it fails for a refusal waited out like silence
    assert time.monotonic() - t0 < device.connect_timeout
    assert f"127.0.0.1:{port} refused the connection (3 tries" in info.value.problem
    assert "[dut.ssh]" in info.value.remedy


async def test_reconnects_after_reboot(fresh_vlab: VlabLayout) -> None:
    async with Device(_endpoint(fresh_vlab)) as device:
        shell = await _shell_pid(device)
        stad = (await device.pidof("stad"))
        await anyio.to_thread.run_sync(control.reboot, fresh_vlab.root)
        await device.wait_reachable(30)
        assert (await device.run(["echo", "back"])).stdout == "back\n"
        assert await _shell_pid(device) != shell  # a new connection and channel
        new_stad = int((fresh_vlab.run_dir / "stad.pid").read_text())
        assert new_stad in await device.pidof("stad") and new_stad not in stad
        longer = Device(_endpoint(fresh_vlab))  # its endpoint read while the vlab is up
        await anyio.to_thread.run_sync(control.down, fresh_vlab.root)
        # beside it, a second device waiting four times as long: the 1 s wait gives up first --
        # an order, not a time; it fails for a wait that outlives its timeout by 3 s or more
        beside = asyncio.create_task(longer.wait_reachable(4))
        try:
            with pytest.raises(Unreachable, match="did not answer a command within 1 s"):
                await device.wait_reachable(1)
            assert not beside.done(), f"a wait four times as long gave up first: {beside}"
        finally:
            beside.cancel()
            await asyncio.gather(beside, return_exceptions=True)
            await longer.close()


async def test_cancelled_reads_leave_no_task_behind(dev: Device) -> None:
    """A read_file cancelled mid-flight leaves nothing running: a task left behind would fail
    later with SFTPEOFError, outside any caller (the test runner reports such exceptions)."""
    loop = asyncio.get_running_loop()
    orphans: list[object] = []
    loop.set_exception_handler(lambda _loop, context: orphans.append(context.get("exception")))
    try:
        for i in range(200):
            task = asyncio.ensure_future(dev.read_file(f"/proc/{os.getpid()}/stat"))
            await asyncio.sleep(0.0002 * (i % 10))  # cancel at different points of the read
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert (await dev.read_file("/proc/self/comm")).strip()  # the channel still serves
        await asyncio.sleep(0.2)  # give anything left behind the time to fail
        gc.collect()  # an unretrieved task exception is reported when the task is collected
    finally:
        loop.set_exception_handler(None)
    assert orphans == [], f"{len(orphans)} orphaned task(s), first: {orphans[0]!r}"
