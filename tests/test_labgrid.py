"""The labgrid backend against a real coordinator and exporter, exporting the vlab's SSH endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.labgrid import (
    LabgridConfig,
    LabgridError,
    PlaceBusy,
    PlaceLease,
    resolve_endpoint,
    strategy_failure,
    transition,
)
from labwarden.vlab.layout import VlabLayout
from tests.labgrid_fixtures import LabgridLab, free_port, running_labgrid

pytestmark = [pytest.mark.anyio, pytest.mark.vlab]



@pytest.fixture(scope="module")
def lab(vlab: VlabLayout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabgridLab]:
    with running_labgrid(tmp_path_factory.mktemp("labgrid"), _ssh_port(vlab)) as lab:
        yield lab


@pytest.fixture(autouse=True)
def _no_lg_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LG_COORDINATOR", "LG_USERNAME", "LG_HOSTNAME"):
        monkeypatch.delenv(var, raising=False)


def _ssh_port(vlab: VlabLayout) -> int:
    return int(vlab.ssh_port_file.read_text())


def _host_pub(vlab: VlabLayout) -> str:
    return str(vlab.host_key) + ".pub"


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _remote_env(tmp_path: Path, lab: LabgridLab, vlab: VlabLayout,
                marker: Path | None = None) -> LabgridConfig:
    strategy = f"      MarkerStrategy: {{marker: '{marker}'}}\n" if marker else ""
    env = _write(tmp_path / "remote.yaml",
                 f"targets:\n  main:\n    resources:\n      RemotePlace: {{name: {lab.place}}}\n"
                 f"    drivers:\n      SSHDriver: {{keyfile: '{vlab.client_key}'}}\n{strategy}")
    return LabgridConfig(env=env, coordinator=lab.coordinator, host_key=_host_pub(vlab))


async def _stad_version(endpoint: SshEndpoint) -> str:
    # pinned: the host key the profile names, not known_hosts=None
    known = asyncssh.import_known_hosts(f"[{endpoint.host}]:{endpoint.port} {endpoint.host_key}\n")
    async with asyncssh.connect(endpoint.host, endpoint.port, username=endpoint.user,
                                client_keys=[endpoint.key], known_hosts=known) as conn:
        res = await conn.run("stad --version", check=True)
    return str(res.stdout)


async def _holder(lease: PlaceLease) -> str | None:
    """The place's holder as the coordinator reports it (in-process: labgrid-client takes ~0.5 s)."""
    return await lease.run_with_session(lambda session: session.places[lease.place].acquired)


def test_resolve_local_env(vlab: VlabLayout, tmp_path: Path) -> None:
    port = _ssh_port(vlab)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").symlink_to(vlab.client_key)
    env = _write(tmp_path / "env.yaml",
                 f"targets:\n  main:\n    resources:\n      NetworkService:\n"
                 f"        address: 127.0.0.1\n        port: {port}\n        username: root\n"
                 f"    drivers:\n      SSHDriver:\n        keyfile: keys/id\n")
    endpoint = resolve_endpoint(LabgridConfig(env=env, host_key=_host_pub(vlab)))
    # a relative keyfile is relative to the env file, as labgrid resolves it
    assert endpoint == SshEndpoint(host="127.0.0.1", port=port, user="root",
                                   key=str(tmp_path / "keys" / "id"),
                                   host_key=Path(_host_pub(vlab)).read_text().strip())


def test_missing_pieces_name_the_yaml_key(tmp_path: Path) -> None:
    env = _write(tmp_path / "env.yaml", "targets:\n  main:\n    drivers:\n      SSHDriver: {keyfile: k}\n")
    with pytest.raises(LabgridError) as err:
        resolve_endpoint(LabgridConfig(env=env))
    assert "targets.main.resources.NetworkService is missing" in err.value.problem
    assert "NetworkService" in err.value.remedy

    env = _write(tmp_path / "env2.yaml",
                 "targets:\n  main:\n    resources:\n      NetworkService: {address: h, username: root}\n")
    with pytest.raises(LabgridError, match=r"targets\.main\.drivers\.SSHDriver\.keyfile is missing"):
        resolve_endpoint(LabgridConfig(env=env))
    assert resolve_endpoint(LabgridConfig(env=env), key_fallback="/k").key == "/k"

    with pytest.raises(LabgridError, match="no target 'dut' under `targets`"):
        resolve_endpoint(LabgridConfig(env=env, target="dut"))
    with pytest.raises(LabgridError, match="could not be found"):
        resolve_endpoint(LabgridConfig(env=str(tmp_path / "absent.yaml")))


def test_a_broken_strategy_is_named_by_what_broke_it() -> None:
    """labgrid's never_retry answers every failure, the first too, with "X is in broken state"
    raised from the cause: a failed flash names the cause -- through a remote strategy's link,
    the daemon's reason (here qlabd's, on a power cut mid-boot)."""
    from labgrid.strategy.common import StrategyError, never_retry

    class Remote:
        broken = None

        @never_retry
        def transition(self, reason: str) -> None:
            raise StrategyError(f"qlabd refused or failed `flash`: {reason}")

    remote = Remote()
    for _ in range(2):  # the first call and the one after it, which the strategy refuses
        with pytest.raises(StrategyError, match="Remote is in broken state") as err:
            remote.transition("StrategyError: QEMU exited during the boot (exit code -9)")
        assert strategy_failure(err.value) == ("StrategyError: qlabd refused or failed `flash`: "
                                               "StrategyError: QEMU exited during the boot "
                                               "(exit code -9)")
    assert strategy_failure(OSError("no such device")) == "OSError: no such device"


async def test_lease_alice_then_bob(lab: LabgridLab, vlab: VlabLayout, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _remote_env(tmp_path, lab, vlab)
    with pytest.raises(LabgridError, match="known only while the place is acquired"):
        resolve_endpoint(cfg)

    monkeypatch.setenv("LG_USERNAME", "alice")  # identity as labgrid takes it
    alice = PlaceLease(cfg)
    monkeypatch.delenv("LG_USERNAME")
    async with alice:
        assert alice.user == "alice" and lab.acquired_by() == alice.holder
        endpoint = alice.endpoint()
        assert (endpoint.host, endpoint.port, endpoint.user, endpoint.key) == (
            "127.0.0.1", _ssh_port(vlab), "root", str(vlab.client_key))
        assert (await _stad_version(endpoint)).startswith("stad ")

        bob = PlaceLease(cfg, user="bob")
        with pytest.raises(PlaceBusy) as busy:
            await bob.acquire()
        assert busy.value.holder == alice.holder and "alice" in str(busy.value)
        assert f"labgrid-client -p {lab.place} release" in busy.value.remedy
        assert not bob.held and await _holder(bob) == alice.holder

    assert not alice.held
    async with bob:
        assert bob.held and bob.endpoint().port == _ssh_port(vlab)
        await alice.release()  # not alice's any more: must leave bob's place alone
        assert await _holder(bob) == bob.holder
    assert lab.acquired_by() is None


async def test_lease_released_when_body_fails(lab: LabgridLab, vlab: VlabLayout, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with PlaceLease(_remote_env(tmp_path, lab, vlab), user="carol"):
            raise RuntimeError("boom")
    assert lab.acquired_by() is None


async def test_lease_errors(lab: LabgridLab, vlab: VlabLayout, tmp_path: Path) -> None:
    cfg = _remote_env(tmp_path, lab, vlab)
    ghost = cfg.model_copy(update={"env": _write(
        tmp_path / "ghost.yaml", "targets:\n  main:\n    resources:\n      RemotePlace: {name: ghost}\n")})
    with pytest.raises(LabgridError, match=r"place ghost .* does not exist") as err:
        await PlaceLease(ghost, user="dave").acquire()
    assert "create" in err.value.remedy

    dead = cfg.model_copy(update={"coordinator": f"127.0.0.1:{free_port()}"})
    with pytest.raises(LabgridError, match="cannot reach the labgrid coordinator"):
        await PlaceLease(dead, user="dave").acquire()

    # held by this very identity (here through labgrid-client): a stale lease, said so
    lab.client("-p", lab.place, "acquire", user="frank")
    try:
        with pytest.raises(PlaceBusy, match="which is this identity") as busy:
            await PlaceLease(cfg, user="frank").acquire()
        assert "LG_USERNAME=frank labgrid-client" in busy.value.remedy
    finally:
        lab.client("-p", lab.place, "release", user="frank")

    local = LabgridConfig(env=_write(tmp_path / "local.yaml", "targets:\n  main: {}\n"))
    async with PlaceLease(local) as lease:  # nothing to hold: a no-op
        assert lease.place is None and not lease.held


async def test_transition_runs_the_strategy(lab: LabgridLab, vlab: VlabLayout, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    cfg = _remote_env(tmp_path, lab, vlab, marker=marker)
    with pytest.raises(LabgridError, match="needs the place"):
        await transition(cfg, "flashed")
    async with PlaceLease(cfg, user="erin") as lease:
        await transition(cfg, "flashed", lease=lease)
        assert marker.read_text() == f"flashed 127.0.0.1:{_ssh_port(vlab)}"
    assert lab.acquired_by() is None

    local = _write(tmp_path / "local.yaml",
                   "targets:\n  main:\n    resources:\n"
                   "      NetworkService: {address: h, port: 2, username: u}\n"
                   f"    drivers:\n      MarkerStrategy: {{marker: '{marker}'}}\n")
    await transition(LabgridConfig(env=local), "off")
    assert marker.read_text() == "off h:2"


async def test_tools_through_a_labgrid_place(lab: LabgridLab, vlab: VlabLayout,
                                             tmp_path: Path) -> None:
    """lab_status and fingerprint_verify run through an acquired place; a second user is refused
    with the holder named; the place is released when the session ends."""
    import tomllib

    from labwarden.lab.config import LabProfile
    from labwarden.runtime.runner import call_tool
    from labwarden.runtime.session import open_lab

    cfg = _remote_env(tmp_path, lab, vlab)
    data = tomllib.loads(vlab.lab_toml.read_text())
    data["dut"].pop("ssh")
    data["dut"]["backend"] = "labgrid"
    data["dut"]["labgrid"] = {"env": cfg.env, "coordinator": cfg.coordinator,
                              "host_key": cfg.host_key}
    profile = LabProfile.from_dict(data)
    async with open_lab(profile, user="alice") as ctx:
        assert lab.acquired_by() is not None and "alice" in (lab.acquired_by() or "")
        status = await call_tool(ctx, "lab_status", {})
        assert status.ok and status.result and status.result["target_pid"]
        verify = await call_tool(ctx, "fingerprint_verify", {"build_id": profile.build.baseline})
        assert verify.ok and verify.result is not None and verify.result["verified"] is True
        with pytest.raises(PlaceBusy, match="alice") as busy:
            async with open_lab(profile, user="bob"):
                pass
        assert "release" in busy.value.remedy
    assert lab.acquired_by() is None
