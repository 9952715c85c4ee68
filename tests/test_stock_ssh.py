"""The vlab reached through Debian's OpenSSH sshd and through dropbear (real servers on
127.0.0.1, busybox ash as root's login shell, an OpenWrt /etc/profile that prints a banner and
resets PATH): no command's output carries the banner, PATH comes from the profile, and the
fingerprint is read from the running image, not from what a login shell printed.

Nothing is mocked: the servers are Debian's binaries in a mount namespace of their own
(labwarden.vlab.stockssh); skipped, with the reason, where they cannot run (not root, or the
packages are missing: `make setup` installs them)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from labwarden.lab.boardstate import BoardState
from labwarden.lab.dut.device import Device
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
    assert rec.result["git_hash_running"] == rec.result["git_hash_expected"]
    status = await call(vlab, "lab_status", profile=prof)
    assert status.ok and status.result is not None
    assert status.result["fingerprint_verified"] is True
    assert status.result["associated"]["total"] == 0  # stacli found through the profile's PATH
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
