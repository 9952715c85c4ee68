"""Drivers chosen by the profile: every `kind` of [load] and [flash] has a driver; the load kinds
`none` and `command`, and the flash kinds `command` and `labgrid`, on a real vlab (the
sysupgrade kind, with a real new boot, is tests/test_second_firmware.py's).

Real parts: the vlab (processes, SSH), its station simulator driven by a user's script, its own
sysupgrade run by a host-side flasher and by a labgrid Strategy (a small one defined here: labgrid
ships none that knows the vlab)."""

from __future__ import annotations

import json
import shlex
import tomllib
import typing
from pathlib import Path
from typing import Any, ClassVar

import attr
import pytest
from labgrid.factory import target_factory
from labgrid.step import step
from labgrid.strategy import Strategy

from labwarden.lab import config
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import flash as flash_drivers
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.drivers.load import LoadError
from labwarden.vlab.layout import VlabLayout
from tests.tooling import baseline, call

pytestmark = pytest.mark.anyio


def _kinds(union: Any) -> set[str]:
    members = typing.get_args(typing.get_args(union)[0])
    return {typing.get_args(m.model_fields["kind"].annotation)[0] for m in members}


def test_every_kind_in_the_schema_has_a_driver() -> None:
    assert _kinds(config.LoadSection) == set(load_drivers.KINDS)
    assert _kinds(config.FlashSection) == set(flash_drivers.KINDS)
    assert set(config._KINDS["load"]) == set(load_drivers.KINDS)
    assert set(config._KINDS["flash"]) == set(flash_drivers.KINDS)


def _profile(vlab: VlabLayout, **sections: dict[str, Any]) -> LabProfile:
    data = tomllib.loads(vlab.lab_toml.read_text())
    data.update(sections)
    return LabProfile.from_dict(data, vlab.lab_toml)


def test_method_is_read_as_kind_and_labgrid_is_not_ignored(vlab: VlabLayout) -> None:
    prof = _profile(vlab, flash={"method": "labgrid", "state": "flashed"})
    assert prof.flash.kind == "labgrid"
    with pytest.raises(flash_drivers.FlashFailed, match="needs an env YAML"):
        flash_drivers.for_profile(prof, None)  # type: ignore[arg-type]


async def test_load_none_holds_no_clients(vlab: VlabLayout) -> None:
    driver = load_drivers.for_profile(_profile(vlab, load={"kind": "none"}, decision={}))
    await driver.hold(0)
    with pytest.raises(LoadError, match="no load") as err:
        await driver.hold(3)
    assert "stations: 0" in err.value.remedy


async def test_load_command_drives_the_users_script(vlab: VlabLayout, tmp_path: Path) -> None:
    """A user's own script holds the stations (here it runs the vlab's simulator); the DUT's
    own count verifies them, split over the profile's radios."""
    pid = tmp_path / "clients.pid"
    script = tmp_path / "clients.sh"
    script.write_text(f"""#!/bin/sh
# clients.sh N: hold N stations (0 = none)
[ -f {pid} ] && kill "$(cat {pid})" 2>/dev/null && sleep 0.3
rm -f {pid}
[ "$1" = 0 ] && exit 0
{vlab.loadgen / "stasim"} --socket {vlab.socket} -n "$1" >/dev/null 2>&1 &
echo $! > {pid}
""")
    script.chmod(0o755)
    prof = _profile(vlab, load={"kind": "command", "hold": [str(script), "{n}"], "radios": 6,
                                "settle_s": 0.5})
    try:
        rec = await call(vlab, "associate", {"stations": 12}, profile=prof)
        assert rec.ok, rec.error
        assert rec.result is not None
        assert rec.result["datamodel_count"] == 12 and rec.result["per_radio"] == [2] * 6
    finally:
        assert (await call(vlab, "associate", {"stations": 0}, profile=prof)).ok
    broken = _profile(vlab, load={"kind": "command", "hold": ["sh", "-c", "echo no radios >&2; exit 3"]})
    rec = await call(vlab, "associate", {"stations": 1}, profile=broken)
    assert not rec.ok and rec.error is not None
    assert "exited 3" in rec.error.message and "no radios" in rec.error.message


async def test_flash_with_a_host_side_command(vlab: VlabLayout, tmp_path: Path) -> None:
    """`{image}` `{host}` `{port}` are filled in; the tool waits for a new target instance."""
    seen = tmp_path / "flasher.args"
    flasher = tmp_path / "flash.sh"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in vlab.dut_env().items())
    flasher.write_text(f"""#!/bin/sh
echo "$@" > {seen}
# the vlab's sysupgrade runs its `reboot` from PATH: the DUT's environment, never the host's
exec env -i {env} sh {vlab.rootfs / "sbin" / "sysupgrade"} "$1"
""")
    flasher.chmod(0o755)
    prof = _profile(vlab, flash={"kind": "command", "command": [str(flasher), "{image}", "{host}",
                                                                "{port}"], "timeout_s": 60})
    good = baseline(vlab)
    rec = await call(vlab, "flash", {"build_id": good}, profile=prof)
    assert rec.ok, rec.error
    image, host, port = seen.read_text().split()
    assert image.endswith("image.tar.gz") and host == "127.0.0.1"
    assert port == str(prof.dut.ssh.port if prof.dut.ssh else 0)
    assert (await call(vlab, "fingerprint_verify", {"build_id": good}, profile=prof)).ok


@target_factory.reg_driver
@attr.s(eq=False)
class VlabSysupgradeStrategy(Strategy):
    """A flashing Strategy for the vlab: on the way to `shell` it installs `images.root` with the
    vlab's own sysupgrade (what a real strategy would do with its flasher driver)."""

    bindings: ClassVar[dict[str, str]] = {"networkservice": "NetworkService"}
    vlab_root = attr.ib(default="", validator=attr.validators.instance_of(str))

    @step(args=["status"])
    def transition(self, status: str, *, step: object) -> None:  # type: ignore[override]
        import subprocess

        if status != "shell":
            return
        image = self.target.env.config.get_image_path("root")
        layout = VlabLayout.at(self.vlab_root)  # its `reboot` is the vlab's: the DUT's own PATH
        subprocess.run(["sh", str(layout.rootfs / "sbin" / "sysupgrade"), image], check=True,
                       env=layout.dut_env(), capture_output=True)


async def test_flash_through_a_labgrid_strategy(vlab: VlabLayout, tmp_path: Path) -> None:
    port = json.loads(json.dumps(tomllib.loads(vlab.lab_toml.read_text())["dut"]["ssh"]["port"]))
    env = tmp_path / "env.yaml"
    env.write_text("targets:\n  main:\n    resources:\n"
                   f"      NetworkService: {{address: 127.0.0.1, port: {port}, username: root}}\n"
                   f"    drivers:\n      VlabSysupgradeStrategy: {{vlab_root: '{vlab.root}'}}\n")
    prof = _profile(vlab, flash={"kind": "labgrid", "env": str(env), "state": "shell",
                                 "timeout_s": 60})
    stad = (vlab.run_dir / "stad.pid").read_text()
    good = baseline(vlab)
    rec = await call(vlab, "flash", {"build_id": good}, profile=prof)
    assert rec.ok, rec.error
    assert any("Strategy -> shell" in p for p in rec.progress)
    assert (vlab.run_dir / "stad.pid").read_text() != stad  # a new instance after the flash
    assert (await call(vlab, "fingerprint_verify", {"build_id": good}, profile=prof)).ok


async def test_the_load_says_whether_it_holds_a_point(vlab: VlabLayout) -> None:
    """`held` is the driver's own answer (the stasim generator's `-n`), `is_held` adds the DUT's
    count where it has a reader; a load without an axis always holds its one point."""
    from labwarden.runtime.session import open_lab

    prof = LabProfile.from_file(vlab.lab_toml)
    driver = load_drivers.for_profile(prof)
    assert driver.axis == "clients" and load_drivers.points(prof) == prof.decision.densities
    try:
        assert (await call(vlab, "associate", {"stations": 12})).ok
        assert await driver.held(12) and not await driver.held(6)
        async with open_lab(prof) as ctx:
            assert await load_drivers.is_held(driver, ctx.device, prof, 12)
            assert not await load_drivers.is_held(driver, ctx.device, prof, 18)
    finally:
        assert (await call(vlab, "associate", {"stations": 0}, profile=prof)).ok
    assert await driver.held(0)
    none = load_drivers.for_profile(_profile(vlab, load={"kind": "none"}, decision={}))
    assert none.axis is None and await none.held(0) and not await none.held(3)
    assert load_drivers.label(none, 0) == "its own workload (no load axis)"


async def test_an_ab_holds_a_users_own_load_through_the_driver(vlab: VlabLayout,
                                                                 tmp_path: Path) -> None:
    """The A/B holds its workload through the load driver alone: a `command` load (the user's
    script, here starting the vlab's simulator) that cannot say what it holds, so the DUT's own
    count decides -- held for A's first segment (it holds 6), already held for B's (no hold)."""
    from labwarden.core.decision import DecisionRule
    from labwarden.runtime.session import open_lab
    from labwarden.tools import abtest

    pid, script, calls = tmp_path / "ab.pid", tmp_path / "ab.sh", tmp_path / "ab.calls"
    script.write_text(f"""#!/bin/sh
echo "$1" >> {calls}
[ -f {pid} ] && kill "$(cat {pid})" 2>/dev/null && sleep 0.3
rm -f {pid}
[ "$1" = 0 ] && exit 0
{vlab.loadgen / "stasim"} --socket {vlab.socket} -n "$1" >/dev/null 2>&1 &
echo $! > {pid}
sleep 0.5
""")
    script.chmod(0o755)
    prof = _profile(vlab, load={"kind": "command", "hold": [str(script), "{n}"], "radios": 6,
                                "settle_s": 0.5})
    good = baseline(vlab)
    rule = DecisionRule(min_windows=2, step_windows=1, max_windows=2)
    try:
        assert (await call(vlab, "fingerprint_verify", {"build_id": good}, profile=prof)).ok
        async with open_lab(prof) as ctx:
            s = await abtest.AB(ctx, good, good, stations=6, rule=rule, window_s=2.0).run()
        assert s.workload == "6 clients" and s.flashes == 0
        assert len(s.a.values) == len(s.b.values) == 2 and s.final.decided
        assert calls.read_text().split() == ["6"]  # held once; B found it held by the DUT's count
    finally:
        assert (await call(vlab, "associate", {"stations": 0}, profile=prof)).ok
