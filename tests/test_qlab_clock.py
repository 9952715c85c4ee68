"""The qlab's guest clock: what `qlab up --clock` accepts, the QEMU arguments each clock gives
the labgrid env, and what is refused (icount under KVM, icount with a second vCPU). Pure: no
guest is booted here (tests/test_qlab.py boots one on the default clock and checks its argv)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from labwarden.qlab import clock, envyaml, profile_writer
from labwarden.qlab.accel import Accel
from labwarden.qlab.image import QlabImage
from labwarden.qlab.layout import QlabLayout


def test_parse_and_spec_round_trip() -> None:
    assert clock.parse("realtime").qemu_args() == []
    default = clock.parse("icount")
    assert default.qemu_args() == ["-icount", f"shift={clock.DEFAULT_SHIFT},sleep=off"]
    custom = clock.parse("icount:shift=auto,sleep=on")
    assert custom.qemu_args() == ["-icount", "shift=auto,sleep=on"]
    for c in (default, custom, clock.parse("realtime"), clock.parse("icount:shift=5")):
        assert clock.parse(c.spec) == c


@pytest.mark.parametrize("bad", ["wallclock", "icount:shift=11", "icount:shift=-1",
                                 "icount:sleep=maybe", "icount:align=on", "icount:shift"])
def test_bad_specs_name_the_option_and_the_forms(bad: str) -> None:
    with pytest.raises(clock.ClockError) as exc:
        clock.parse(bad)
    assert "shift" in exc.value.remedy or "realtime" in exc.value.remedy


def test_defaults_per_accelerator_and_refusals() -> None:
    assert clock.for_accel(None, "tcg").kind == clock.parse(clock.DEFAULT_SPEC).kind
    assert clock.for_accel(None, "kvm").kind == "realtime"
    with pytest.raises(clock.ClockError, match="needs TCG"):
        clock.for_accel("icount", "kvm")
    icount = clock.parse("icount")
    assert clock.default_smp(icount) == 1 and clock.default_smp(clock.parse("realtime")) == 2
    clock.check_smp(icount, 1)
    clock.check_smp(clock.parse("realtime"), 4)
    with pytest.raises(clock.ClockError, match="one vCPU"):
        clock.check_smp(icount, 2)


def _image(tmp_path: Path) -> QlabImage:
    return QlabImage(key="k", base_key="b", dir=str(tmp_path), kernel_version="6.1.0-test",
                     kernel=str(tmp_path / "vmlinuz"), initrd=str(tmp_path / "initrd.img"),
                     rootfs=str(tmp_path / "root.ext4"), base_root=str(tmp_path / "root"),
                     packages={}, requested={}, host_key="ssh-ed25519 AAAA test",
                     client_key=str(tmp_path / "id"), built_at="now")


def test_the_env_yaml_gives_qemu_the_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envyaml, "qemu_binary", lambda: "/usr/bin/qemu-system-x86_64")
    layout = QlabLayout.at(tmp_path / "q")
    layout.keys.mkdir(parents=True)
    tcg = Accel(name="tcg", cpu="max", reason="test")
    for spec, want in (("icount", "-icount shift=0,sleep=off -smp 1"), ("realtime", "-smp 2")):
        c = clock.parse(spec)
        guest = envyaml.GuestSpec(accel=tcg, clock=c, smp=clock.default_smp(c), ssh_port=2222)
        envyaml.write(layout, _image(tmp_path), guest)
        env = yaml.safe_load(layout.env_yaml.read_text())
        extra = env["targets"]["main"]["drivers"]["QlabQEMUDriver"]["extra_args"]
        assert f"-accel tcg,tb-size=256 {want} " in extra
        assert ("-icount" in extra) == (spec == "icount")
        assert f"clock {c.spec}" in layout.env_yaml.read_text().splitlines()[1]


def test_the_traffic_variant_stays_on_real_time_and_the_profile_says_which_clock() -> None:
    assert clock.for_accel(None, "tcg", traffic=True).kind == "realtime"
    assert clock.for_accel("icount", "tcg", traffic=True).kind == "icount"  # asked for: given
    note = profile_writer._clock_note(clock.parse("icount"))
    assert "icount:shift=0,sleep=off" in note and "not of real seconds" in note
    assert all(line.startswith("# ") for line in note.splitlines())  # TOML comments only
    assert "moves with the host's load" in profile_writer._clock_note(clock.parse("realtime"))


@pytest.mark.parametrize("spec", ["icount", "realtime"])
def test_qemu_itself_accepts_each_clocks_arguments(spec: str) -> None:
    """The suite's qlabs boot on the real-time clock (tests/qlab_fixtures.TEST_CLOCK), so the
    default TCG clock's arguments are handed to the real QEMU here: a paused machine (-S) with
    them keeps running, where an argument QEMU refuses makes it exit at once (the last case)."""
    qemu = envyaml.qemu_binary()
    c = clock.parse(spec)
    base = [qemu, "-accel", "tcg", *c.qemu_args(), "-smp", str(clock.default_smp(c)), "-machine",
            "pc", "-m", "64M", "-display", "none", "-nodefaults", "-S", "-monitor", "none",
            "-serial", "none"]
    for argv, runs in ((base, True), ([*base, "-icount", "shift=99"], False)):
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            time.sleep(1.5)
            assert (proc.poll() is None) == runs, (argv, proc.returncode,
                                                   proc.stderr.read() if proc.stderr else b"")
        finally:
            proc.kill()
            proc.wait()
