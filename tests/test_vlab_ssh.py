"""The vlab's SSH endpoint, exercised with a real asyncssh client over loopback."""

from __future__ import annotations

import hashlib
from pathlib import Path

import anyio
import asyncssh
import pytest

from labwarden.vlab.layout import VlabLayout

pytestmark = pytest.mark.anyio



def _connect(layout: VlabLayout, **kw: object) -> asyncssh.connection._ConnectionManager:
    opts: dict[str, object] = {
        "username": "root", "client_keys": [str(layout.client_key)],
        "known_hosts": str(layout.known_hosts)}
    opts.update(kw)
    port = int(layout.ssh_port_file.read_text())
    return asyncssh.connect("127.0.0.1", port, **opts)


async def test_exec_with_pinned_host_key(vlab: VlabLayout) -> None:
    async with _connect(vlab) as conn:
        res = await conn.run("stad --version; echo to-stderr >&2; exit 7")
    assert res.exit_status == 7
    assert str(res.stdout).startswith("stad ")
    assert res.stderr == "to-stderr\n"


async def test_large_output_is_complete(vlab: VlabLayout) -> None:
    async with _connect(vlab) as conn:
        res = await conn.run("seq 1 200000")
    lines = str(res.stdout).splitlines()
    assert len(lines) == 200000 and lines[-1] == "200000"


async def test_sftp_roundtrip_sha256(vlab: VlabLayout, tmp_path: Path) -> None:
    local = tmp_path / "blob"
    local.write_bytes(bytes(range(256)) * 4096)
    remote = str(vlab.tmp_dir / "blob")
    async with _connect(vlab) as conn, conn.start_sftp_client() as sftp:
        await sftp.put(str(local), remote)
        await sftp.get(str(vlab.binary("stad")), str(tmp_path / "stad"))
        res = await conn.run(f"sha256sum {remote}")
    assert str(res.stdout).split()[0] == hashlib.sha256(local.read_bytes()).hexdigest()
    assert (tmp_path / "stad").read_bytes() == vlab.binary("stad").read_bytes()


async def test_wrong_client_key_refused(vlab: VlabLayout) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        async with _connect(vlab, client_keys=[other]):
            pass


async def test_wrong_host_key_refused(vlab: VlabLayout, tmp_path: Path) -> None:
    port = int(vlab.ssh_port_file.read_text())
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {impostor}")
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        async with _connect(vlab, known_hosts=str(known)):
            pass


async def test_channel_close_hangs_up_the_session(vlab: VlabLayout) -> None:
    """Like sshd, a dropped channel SIGHUPs the session: DUT-side dead-men rely on it."""
    marker = vlab.tmp_dir / "hup-marker"
    async with _connect(vlab) as conn:
        proc = await conn.create_process(
            f"trap 'echo hup > {marker}; exit 0' HUP; echo ready; while :; do sleep 0.05; done")
        assert (await proc.stdout.readline()) == "ready\n"
        proc.close()
    with anyio.fail_after(5):
        while not marker.exists():
            await anyio.sleep(0.05)
    assert marker.read_text() == "hup\n"
