"""Power-cycling a place before a one-place reproduction: which power driver a DUT kind gets, and
what the reproduction's record says when a kind has none. No lab: the drivers are only chosen
(a Device connects on first use, and none is used here); the cycle itself runs on a real
one-place vlab fleet in tests/test_fleet_one_place.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labwarden.core.experiments import PowerCycle, Reproduction
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import power
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.endpoint import SshEndpoint

PROFILE = """[lab]
name = "one"
data_dir = "data"

[dut]
backend = "ssh"

[dut.ssh]
host = "127.0.0.1"
key = "/dev/null"
known_hosts = "/dev/null"

[build]
repo = "src"
builds = "builds"
command = ["make"]
artifacts = {{ stad = "usr/sbin/stad" }}

[flash]
{flash}

[target]
process = "stad"
"""


def _profile(tmp_path: Path, flash: str) -> LabProfile:
    path = tmp_path / "lab.toml"
    path.write_text(PROFILE.format(flash=flash))
    return LabProfile.from_file(path)


def _device() -> Device:
    return Device(SshEndpoint(host="127.0.0.1", key="/dev/null", known_hosts="/dev/null"))


@pytest.mark.parametrize(("flash", "reboots", "words"), [
    ('kind = "vlab"', False, "process manager restarts every DUT process"),
    ('kind = "sysupgrade"', True, "a new boot"),
])
def test_a_dut_that_reboots_itself_is_power_cycled_by_its_own_reboot(
        tmp_path: Path, flash: str, reboots: bool, words: str) -> None:
    driver = power.for_profile(_profile(tmp_path, flash), _device())
    assert isinstance(driver, power.Reboot) and driver.reboots is reboots
    assert words in driver.describe() and "`reboot`" in driver.describe()


def test_a_labgrid_dut_is_power_cycled_by_its_strategy(tmp_path: Path) -> None:
    (tmp_path / "env.yaml").write_text("targets: {main: {drivers: {}}}\n")
    driver = power.for_profile(_profile(tmp_path, f'kind = "labgrid"\nenv = "{tmp_path}/env.yaml"'),
                               _device())
    assert isinstance(driver, power.StrategyCycle)
    assert driver.describe() == "labgrid main: Strategy -> shell, no image"


def test_a_kind_without_a_power_driver_says_so_in_the_reproduction(tmp_path: Path) -> None:
    """A host-side flash command tells labwarden how to flash, not how to power the board: no
    cycle is done, and the one-place reproduction's record says why."""
    prof = _profile(tmp_path, 'kind = "command"\ncommand = ["/opt/lab/flash.sh", "{image}"]')
    with pytest.raises(power.NoPowerCycle, match=re.escape('[flash] kind = "command" has no power '
                                                           'driver')) as exc:
        power.for_profile(prof, _device())
    assert "a second place to reproduce on" in exc.value.remedy
    none = PowerCycle(done=False, how=exc.value.problem)
    rep = Reproduction(place="ap-0", same_place=True, power_cycle=none, error="not run")
    assert rep.describe().startswith('no second screening on ap-0 without a power cycle ([flash] kind = '
                                     '"command" has no power driver')
    done = Reproduction(place="ap-0", same_place=True,
                        power_cycle=PowerCycle(done=True, how="the DUT's own `reboot`", seconds=3.2))
    assert done.describe().startswith("no second screening on ap-0 after a power cycle: ")
