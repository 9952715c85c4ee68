"""vlab up/reboot/down on real processes: drift, respawn, clean shutdown, clear failures."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from labwarden.lab import uci
from labwarden.lab.host import tenancy
from labwarden.vlab import confine, control, firmware, procs, tuning
from labwarden.vlab.layout import SERVICES, VlabLayout


def _wait(pred, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_up_writes_a_usable_profile(vlab: VlabLayout) -> None:
    import tomllib

    prof = tomllib.loads(vlab.lab_toml.read_text())
    assert prof["dut"]["ssh"]["port"] == int(vlab.ssh_port_file.read_text())
    assert prof["dut"]["ssh"]["host_key"].startswith("ssh-ed25519 ")
    assert prof["target"]["suspects"] == ["stamon"]
    st = control.status(vlab.root)
    assert st.up and all(st.services.values())
    assert st.running_version and st.running_version.split()[1] == \
        firmware.git(vlab.src, "rev-parse", "HEAD")


def test_associate_round_robin_and_cleanup(vlab: VlabLayout) -> None:
    counts = control.associate(vlab.root, 60)
    assert counts["total"] == 60
    assert [counts[f"vap{i}"] for i in range(6)] == [10] * 6
    assert control.associate(vlab.root, 0)["total"] == 0
    assert control.status(vlab.root).stasim_pid is None


def test_supervisor_respawns_killed_stad(vlab: VlabLayout) -> None:
    old = procs.read_pid(vlab.run_dir / "stad.pid")
    assert old is not None
    os.kill(old, signal.SIGKILL)
    assert _wait(lambda: procs.read_pid(vlab.run_dir / "stad.pid") not in (None, old)
                 and control._answers(vlab))
    assert procs.alive(procs.read_pid(vlab.run_dir / "stad.pid"))


def test_disabled_process_manager_does_not_respawn(fresh_vlab: VlabLayout) -> None:
    uci.save(fresh_vlab.config_dir / "procmgr", [uci.Section("procmgr", "main", {"enabled": "0"})])
    pid = procs.read_pid(fresh_vlab.run_dir / "stamon.pid")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(1.5)
    assert not any(procs.alive(p) for p in procs.processes_under(fresh_vlab.root)
                   if "stamon" in os.readlink(f"/proc/{p}/exe"))


def test_reboot_applies_drift(fresh_vlab: VlabLayout) -> None:
    tuning.pin(fresh_vlab, trace_level=200)
    before = tuning.read_state(fresh_vlab)
    assert before.governors[0] == "performance" and not before.boost
    assert len(before.vaps_enabled) == 6 and 400 not in before.trace_levels.values()
    control.reboot(fresh_vlab.root)
    after = tuning.read_state(fresh_vlab)
    assert set(after.governors) == {"schedutil"} and after.boost
    assert set(after.channels.values()) == {"auto"}
    assert 0 < len(after.vaps_enabled) < 6, "the scaling VAPs are switched off"
    assert 400 in after.trace_levels.values()
    assert "drift: cpufreq.boost=1" in (fresh_vlab.logs / "dutd.log").read_text()
    # the boot before is gone: one stad and one stamon (every reboot had left the old pair
    # running as nobody under a dead bwrap, and each old stamon polled the new stad)
    control.reboot(fresh_vlab.root)
    exes = [Path(os.readlink(f"/proc/{pid}/exe")).name for pid in procs.processes_under(fresh_vlab.root)]
    assert sorted(e for e in exes if e in ("stad", "stamon")) == ["stad", "stamon"], exes


def test_down_leaves_no_process(tmp_path: Path) -> None:
    root = tmp_path / "v"
    control.up(root)
    control.associate(root, 18)
    assert len(procs.processes_under(root)) >= 4  # dutd, stad, stamon, stasim
    control.down(root)
    assert procs.processes_under(root) == []
    assert not VlabLayout.at(root).dutd_pid.exists()


def test_down_after_daemon_kill9_still_cleans_up(tmp_path: Path) -> None:
    root = tmp_path / "v"
    control.up(root)
    layout = VlabLayout.at(root)
    pid = procs.read_pid(layout.dutd_pid)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    procs.wait_gone(pid, 5)
    # down sweeps whatever the dead daemon left (processes, its services' cgroups)
    control.down(root)
    assert procs.processes_under(root) == []
    assert [tenancy.Cgroup.existing(confine.cgroup_name(layout, n)) for n in SERVICES] == [None] * 2
    assert not list(layout.run_dir.glob("*.cgroup"))


def test_up_after_daemon_kill9_finds_its_services_gone(tmp_path: Path) -> None:
    """kill -9 of dutd: its services end with it -- the parent-death signal reaches bwrap (root)
    and its namespace's init, and the kernel kills a pid namespace whose init ends (before each
    service had a namespace of its own they outlived it: vlab/confine.py). The next `up` on the
    dir says it replaced the stale pid file; afterwards one stad and one stamon run, the new
    ones."""
    root = tmp_path / "v"
    control.up(root)
    layout = VlabLayout.at(root)
    pid = procs.read_pid(layout.dutd_pid)
    old = {n: procs.read_pid(layout.run_dir / f"{n}.pid") for n in SERVICES}
    assert pid is not None and all(procs.alive(p) for p in old.values())
    os.kill(pid, signal.SIGKILL)
    procs.wait_gone(pid, 5)
    assert _wait(lambda: not any(procs.alive(p) for p in old.values())), old
    try:
        info = control.up(root)
        assert any("stale pid file" in n for n in info.notes), info.notes
        running = [p for p in procs.processes_under(root)
                   if Path(os.readlink(f"/proc/{p}/exe")).name in SERVICES]
        assert sorted(running) == sorted(info.pids.values()), (running, info.pids)
    finally:
        control.down(root)
    assert procs.processes_under(root) == []


def test_second_up_on_same_dir_is_refused(vlab: VlabLayout) -> None:
    before = procs.processes_under(vlab.root)
    with pytest.raises(control.VlabError, match="already up") as err:
        control.up(vlab.root)
    assert "vlab down" in err.value.remedy
    assert sorted(procs.processes_under(vlab.root)) == sorted(before)


def test_stale_pid_file_is_reported_and_replaced(tmp_path: Path) -> None:
    root = tmp_path / "v"
    layout = VlabLayout.at(root)
    layout.run_dir.mkdir(parents=True)
    layout.dutd_pid.write_text("999999\n")
    try:
        info = control.up(root)
        assert any("stale pid file" in n for n in info.notes)
        assert procs.read_pid(layout.dutd_pid) != 999999
    finally:
        control.down(root)


def test_port_in_use_is_refused_cleanly(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(control.VlabError, match=f"port {port}") as err:
            control.up(tmp_path / "v", port=port)
    assert "--port" in err.value.remedy
    assert procs.processes_under(tmp_path / "v") == []


def test_missing_compiler_is_refused_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(control.VlabError, match="missing build tools: gcc") as err:
        control.up(tmp_path / "v")
    assert "apt-get install" in err.value.remedy
    assert not (tmp_path / "v").exists()
