"""The vlab reached through Debian's OpenSSH sshd and through dropbear (real servers on
127.0.0.1, busybox ash as root's login shell, an OpenWrt /etc/profile that prints a banner and
resets PATH): no command's output carries the banner, PATH comes from the profile, and the
fingerprint is read from the running image, not from what a login shell printed.

Nothing is mocked: the servers are Debian's binaries in a mount namespace of their own
(labwarden.vlab.stockssh); skipped, with the reason, where they cannot run (not root, or the
packages are missing: `make setup` installs them)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from labwarden.core.devtext import unmark
from labwarden.lab.boardstate import BoardState
from labwarden.lab.dut.device import Device
from labwarden.qlab import guestssh
from labwarden.vlab import stockssh
from labwarden.vlab.layout import VlabLayout
from tests import stockdut
from tests.tooling import baseline, call

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=stockssh.SERVERS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           vlab: VlabLayout) -> Iterator[stockssh.StockSsh]:
    yield from stockdut.serve(request.param, tmp_path_factory.mktemp(request.param))


async def _login_shell_output(server: stockssh.StockSsh) -> str:
    """What a session without a command prints (a login shell: /etc/profile runs)."""
    async with asyncssh.connect("127.0.0.1", server.port, username="root",
                                client_keys=[str(server.client_key)], known_hosts=None,
                                server_host_key_algs=["ssh-ed25519"]) as conn:
        proc = await conn.create_process(None, encoding=None)
        proc.stdin.write(b'echo "PATH=$PATH"; exit\n')
        return (await asyncio.wait_for(proc.stdout.read(), 10)).decode()


async def test_the_fixture_is_a_login_shell_that_prints_a_banner(server: stockssh.StockSsh) -> None:
    """The trap is real: a shell session prints the banner and resets PATH."""
    text = await _login_shell_output(server)
    assert "r23809-234f1a2efa" in text
    assert "PATH=/usr/sbin:/usr/bin:/sbin:/bin" in text


async def test_no_banner_in_any_output_and_path_from_the_profile(server: stockssh.StockSsh) -> None:
    env = {"PATH": "/opt/nowhere:/usr/bin:/bin", "LW_PROBE": "it's here"}
    async with Device(server.endpoint(), env=env) as dev:
        first = await dev.run(["cat", "/proc/sys/kernel/random/boot_id"])
        assert first.stdout == server.boot_id_file.read_text()  # nothing before, nothing after
        for method in (dev.run, dev.exec):
            res = await method(["sh", "-c", 'echo "$PATH|$LW_PROBE"; sh --help 2>&1 | head -n 1'])
            path, shell = res.stdout.splitlines()
            assert path == "/opt/nowhere:/usr/bin:/bin|it's here"
            assert shell.startswith("BusyBox")  # the DUT's sh is busybox ash
        assert dev.stray_output == []


async def test_stray_output_is_discarded_and_reported(server: stockssh.StockSsh) -> None:
    """A background writer prints between two requests: not part of the next reply."""
    async with Device(server.endpoint()) as dev:
        await dev.run(["sh", "-c", "(sleep 0.2; echo STRAY-LINE; echo STRAY-ERR >&2) &"])
        await asyncio.sleep(0.5)
        res = await dev.run(["echo", "mine"])
        assert res.stdout == "mine\n" and res.stderr == ""
        assert any("STRAY-LINE" in s for s in dev.stray_output)
        assert any("STRAY-ERR" in s for s in dev.stray_output)


async def test_fingerprint_and_load_through_the_stock_server(server: stockssh.StockSsh,
                                                           vlab: VlabLayout) -> None:
    """The issue's first failure: stacli 'command not found' and the banner's revision read as
    the running git hash. Through the stock server, both work as on the vlab's own sshd."""
    prof = stockdut.behind(vlab, server)
    rec = await call(vlab, "fingerprint_verify", {"build_id": baseline(vlab)}, profile=prof)
    assert rec.ok, rec.error
    assert rec.result is not None and rec.result["verified"], rec.result
    assert unmark(rec.result["git_hash_running"]) == rec.result["git_hash_expected"]
    status = await call(vlab, "lab_status", profile=prof)
    assert status.ok and status.result is not None
    assert status.result["fingerprint_verified"] is True
    assert "total" in status.result["associated"]  # stacli found through the profile's PATH
    assert not [p for p in status.result["problems"] if "not running" in p]


async def test_a_failed_check_revokes_verified(server: stockssh.StockSsh, vlab: VlabLayout) -> None:
    """fingerprint_verify of a build that does not run says verified: false, and lab_status no
    longer reports the earlier verification; an unreadable check revokes it too."""
    prof = stockdut.behind(vlab, server)
    good = baseline(vlab)
    assert (await call(vlab, "fingerprint_verify", {"build_id": good}, profile=prof)).ok
    assert BoardState.load(vlab.data_dir).fingerprint_ok()

    # a build whose manifest names a file the DUT does not have: the check fails
    builds = Path(prof.build.builds)
    fake = "f" * 16
    (builds / fake).mkdir(exist_ok=True)
    manifest = (builds / good / "manifest.json").read_text().replace(good, fake)
    (builds / fake / "manifest.json").write_text(manifest.replace('"git_hash": "', '"git_hash": "0'))
    try:
        bad = await call(vlab, "fingerprint_verify", {"build_id": fake}, profile=prof)
        assert bad.ok and bad.result is not None and bad.result["verified"] is False
        status = await call(vlab, "lab_status", profile=prof)
        assert status.result is not None and status.result["fingerprint_verified"] is False
        assert not BoardState.load(vlab.data_dir).fingerprint_ok()

        # verified again, then a check that cannot read the DUT: no sha256sum in its PATH
        assert (await call(vlab, "fingerprint_verify", {"build_id": good}, profile=prof)).ok
        assert BoardState.load(vlab.data_dir).fingerprint_ok()
        blind = prof.model_copy(deep=True)
        blind.dut.env = {**prof.dut.env, "PATH": "/nonexistent"}
        failed = await call(vlab, "fingerprint_verify", {"build_id": good}, profile=blind)
        assert not failed.ok and failed.error is not None
        assert "sha256sum" in failed.error.message
        assert not BoardState.load(vlab.data_dir).fingerprint_ok()
    finally:
        shutil.rmtree(builds / fake, ignore_errors=True)
    # leave the vlab verified for the next test
    assert (await call(vlab, "fingerprint_verify", {"build_id": good}, profile=prof)).ok


_DUT_PROCS = r"""
for d in /proc/[0-9]*; do
  read -r st < "$d/stat" 2>/dev/null || continue
  r="${st##*)}"; set -- $r
  [ "$1" != Z ] || continue
  c=${st#*(}; c=${c%)*}
  case $c in perf|sh|sleep|lw-*) c=$(tr '\0\n' '  ' < "$d/cmdline" 2>/dev/null) || continue ;; esac
  echo "${d#/proc/} $2 $c"
done
exit 0
"""
"""Every live process on the DUT: pid, ppid, and the command line of those that may be ours
(perf, sh, sleep, lw-*; the others' names only: a fork per process made one listing take over
a second on a loaded host, which the 2 s budget below then counted against the clean-up)."""


async def _leftovers(dev: Device, vlab: VlabLayout) -> tuple[list[str], list[str]]:
    """The measurement's processes on the DUT (perf, the sampler, and their children: anything
    naming the target's pid) and the vlab's uprobes, as the DUT lists them."""
    target = (vlab.run_dir / "stad.pid").read_text().split()[0]
    rows = [ln.split(" ", 2) for ln in
            (await dev.run(["sh", "-c", _DUT_PROCS])).stdout.splitlines() if ln.count(" ") >= 2]
    ours = {pid for pid, _pp, cmd in rows
            if f" {target} " in f" {cmd} " and ("perf" in cmd or "lw-sampler" in cmd)}
    grown = True
    while grown:
        more = {pid for pid, pp, _c in rows if pp in ours} - ours
        grown, ours = bool(more), ours | more
    running = [f"{pid} {cmd}" for pid, _pp, cmd in rows if pid in ours]
    events = (await dev.run(["cat", "/sys/kernel/tracing/uprobe_events"])).stdout
    return running, [ln for ln in events.splitlines() if str(vlab.root) in ln]


async def test_cancel_mid_window_stops_everything_before_the_window_ends(
        server: stockssh.StockSsh, vlab: VlabLayout) -> None:
    """A measurement cancelled mid-window leaves no perf record, perf stat, sampler or uprobe on the
    DUT before its window would have ended by itself -- over a server that sends no SIGHUP when
    the sessions close. An order of events, not a time bound: a quiet host cleans up in under 2 s,
    a loaded one took 2.09 s. The window cannot have begun before the call was asked for, so it
    would end by itself no sooner than `window_s` after that: the bound a clean-up that never
    came (perf, the sampler and perf stat running out) would miss."""
    from labwarden.runtime.runner import call_tool
    from labwarden.runtime.session import open_lab
    from tests.conftest import needs_uprobes

    needs_uprobes()
    prof = stockdut.behind(vlab, server)
    assert (await call(vlab, "fingerprint_verify", {"build_id": baseline(vlab)}, profile=prof)).ok
    window_s = 30  # long: it costs nothing when the cancel works, and leaves a loaded host room
    async with Device(server.endpoint(), env=prof.dut.env) as dev:

        async def measuring() -> object:
            async with open_lab(prof) as ctx:
                return await call_tool(ctx, "measure", {"stations": 6, "window_s": window_s,
                                                        "reps": 1, "settle_s": 0})

        asked = asyncio.get_running_loop().time()
        task = asyncio.create_task(measuring())
        deadline = asked + 30
        while True:  # until perf record, perf stat, the sampler and the probes all run
            running, events = await _leftovers(dev, vlab)
            if len([r for r in running if " record " in r or " stat " in r]) >= 2 and events \
                    and any("lw-sampler" in r for r in running):
                break
            assert not task.done(), (task.result(), running, events)
            assert asyncio.get_running_loop().time() < deadline, (running, events)
            await asyncio.sleep(0.1)
        window_end = asked + window_s  # at the earliest: it began after the call was asked for
        await asyncio.sleep(1.0)  # mid-window
        t0 = asyncio.get_running_loop().time()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cleaned = asyncio.get_running_loop().time() - t0
        while True:
            running, events = await _leftovers(dev, vlab)
            elapsed = asyncio.get_running_loop().time() - t0
            if not running and not events:
                break
            assert asyncio.get_running_loop().time() < window_end, \
                f"still on the DUT {elapsed:.2f} s after the cancel: {running} {events}"
            await asyncio.sleep(0.05)
        print(f"clean-up done {cleaned:.2f} s, nothing left seen {elapsed:.2f} s after the cancel")
        # and the DUT is usable at once: no leftover in tmp either
        left = (await dev.run(["sh", "-c", f"ls {vlab.tmp_dir} | grep -e lw-jobs -e lw-prof; "
                                            "exit 0"])).stdout
        assert left == "", left


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def test_cancelled_attribution_resumes_and_leaves_no_helper(server: stockssh.StockSsh,
                                                                  vlab: VlabLayout) -> None:
    """lw-pause and the sampler are jobs too: a cancelled attribute resumes the suspect and
    leaves neither behind, over a server that sends no SIGHUP."""
    from labwarden.runtime.runner import call_tool
    from labwarden.runtime.session import open_lab

    prof = stockdut.behind(vlab, server)
    assert (await call(vlab, "fingerprint_verify", {"build_id": baseline(vlab)}, profile=prof)).ok
    stamon = int((vlab.run_dir / "stamon.pid").read_text().split()[0])
    window_s = 30

    async def attributing() -> object:
        async with open_lab(prof) as ctx:
            return await call_tool(ctx, "attribute", {"suspect": "stamon", "window_s": window_s,
                                                      "baseline_s": 1})

    loop = asyncio.get_running_loop()
    asked = loop.time()
    task = asyncio.create_task(attributing())
    deadline = asked + 20
    while _state(stamon) not in "tT":
        assert not task.done(), task.result()
        assert loop.time() < deadline
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    t0 = loop.time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with Device(server.endpoint(), env=prof.dut.env) as dev:
        while True:
            rows = (await dev.run(["sh", "-c", _DUT_PROCS])).stdout
            helpers = [ln for ln in rows.splitlines()
                       if "lw-pause" in ln or ("lw-sampler" in ln and _mentions_target(ln, vlab))]
            if _state(stamon) not in "tT" and not helpers:
                break
            # an order, not a time: before the window, which began after the call was asked
            # for, would have ended by itself (the helper's deadline, the sampler's run)
            assert loop.time() < asked + window_s, (helpers, _state(stamon))
            await asyncio.sleep(0.05)
    print(f"suspect running, no helper left {loop.time() - t0:.2f} s after the cancel")


def _mentions_target(line: str, vlab: VlabLayout) -> bool:
    target = (vlab.run_dir / "stad.pid").read_text().split()[0]
    return f" {target} " in f" {line} "


async def test_a_refused_session_is_asked_for_again(server: stockssh.StockSsh,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """OpenSSH refuses a session past MaxSessions (10 per connection; a session whose command
    still runs counts): an exec that meets the refusal ran nothing, so it asks again and runs
    once a slot frees. dropbear has no such limit: the exec runs at once."""
    caplog.set_level(logging.INFO, logger="labwarden.lab.dut.commands")
    async with Device(server.endpoint()) as dev:
        await dev.run(["true"])  # the command channel holds one session
        conn = await dev._connection.ensure()
        held = await asyncio.gather(*(conn.create_process("sleep 1", encoding=None)
                                      for _ in range(9)))
        res = await dev.exec(["echo", "ran"], timeout=30)
        for proc in held:
            proc.close()
    refused = [r.message for r in caplog.records if "refused an exec session" in r.message]
    assert res.exit_status == 0 and res.stdout == "ran\n"
    assert bool(refused) == (server.kind == "openssh"), refused


def _server_side(pid: int) -> int:
    """The nearest ancestor of `pid` that is the SSH server's process for its connection."""
    while pid > 1:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        if comm in ("dropbear", "sshd", "sshd-session"):
            return pid
        pid = int(fields[1].split()[1])
    raise AssertionError("no SSH server process above the command channel's shell")


@pytest.mark.parametrize("how", ["exec", "run"])
async def test_a_connection_dead_at_a_new_sessions_open_is_replaced(
        server: stockssh.StockSsh, how: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The connection dies between the check that it is open and the session's open -- as
    dropbear 2022.83 does on its own (mkj/dropbear#321: a failed assertion when a session opens
    as another session's process exits; seen here under the logfilt loop): nothing of the
    request ran, so it runs on a new connection instead of failing "may or may not have run".
    The server's side of the connection is killed for real; the one staged part is the
    timing (`ensure` hands out the connection it checked just before the kill)."""
    caplog.set_level(logging.WARNING, logger="labwarden.lab.dut.commands")
    async with Device(server.endpoint()) as dev:
        shell = int((await dev.run(["sh", "-c", "echo $PPID"])).stdout)
        stale = await dev._connection.ensure()
        os.kill(_server_side(shell), signal.SIGKILL)
        for _ in range(100):
            if stale.is_closed():
                break
            await asyncio.sleep(0.05)
        assert stale.is_closed()
        real_ensure, handed = dev._connection.ensure, []

        async def checked_before_the_kill(*a: Any, **kw: Any) -> asyncssh.SSHClientConnection:
            if not handed:
                handed.append(stale)
                return stale
            return await real_ensure(*a, **kw)

        monkeypatch.setattr(dev._connection, "ensure", checked_before_the_kill)
        res = await getattr(dev, how)(["echo", "ran"])
        assert res.exit_status == 0 and res.stdout == "ran\n"
        assert dev._connection.current is not stale and not dev._connection.gone
    assert any("closed under a new session" in r.message for r in caplog.records)


async def test_the_qlab_cable_connects_again_after_a_silent_accept(server: stockssh.StockSsh) -> None:
    """The qlab's host-side cable (qlab/guestssh) against a real server behind a port that, the
    first time, accepts and never answers -- what QEMU's user-mode network does while the guest
    boots: the connect that timed out is tried again and the command runs; with one try it
    fails. The port in front is a plain TCP relay (the one staged part)."""
    accepted: list[asyncio.StreamWriter] = []

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        if len(accepted) % 2:  # every other connection: accepted and never answered
            return
        up_r, up_w = await asyncio.open_connection("127.0.0.1", server.port)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
            w.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer), return_exceptions=True)

    front = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = front.sockets[0].getsockname()[1]
    ep = server.endpoint().model_copy(update={"port": port})
    try:
        res = await guestssh.run(ep, ["echo", "ran"], timeout=30, connect_timeout=1)
        assert res.ok and res.stdout == "ran\n" and len(accepted) == 2
        with pytest.raises(TimeoutError):
            await guestssh.run(ep, ["echo", "ran"], timeout=30, connect_timeout=1, connect_tries=1)
        assert len(accepted) == 3
    finally:
        for w in accepted:
            w.close()
        front.close()
        await front.wait_closed()
