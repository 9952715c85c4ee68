"""The qlab: a Debian kernel under QEMU, run as a labgrid target, with real 802.11 radios and
clients. One guest for the module (the `qlab` fixture boots it through labgrid: qlabd holds the
QEMUDriver and moves the QlabStrategy to `shell`). Nothing is stood in for: mac80211_hwsim radios,
hostapd, wpa_supplicant, the firmware's nl80211 HAL, sysupgrade and the reboot are all real.
The middle tests drive the qlab as labwarden drives any DUT: through its lab profile (the labgrid
backend, [load] kind = "wpa_supplicant", [flash] kind = "labgrid": labwarden's QlabdStrategy asks
qlabd to power off, program the flash disk and boot) and the tool runner.
The last test brings the qlab down through the CLI."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.devtext import unmark
from labwarden.core.experiments import PowerCycle
from labwarden.lab.config import LabProfile
from labwarden.lab.labgrid import LabgridConfig, resolve_endpoint
from labwarden.lab.labgrid import transition as labgrid_transition
from labwarden.qlab import control, ctlsock, firmware, guestssh, procs, stations
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools.powercycle import power_cycle
from tests.qlab_fixtures import Qlab

pytestmark = pytest.mark.timeout(900)

VAPS = [f"vap{k}" for k in range(6)]


def _mac(i: int) -> str:
    return "02:5a:" + ":".join(f"{b:02x}" for b in i.to_bytes(4, "big"))


def _ap_macs(q: Qlab) -> dict[str, set[str]]:
    """Each AP's stations, straight from the kernel (not through lw-sta)."""
    res = q.sh("for k in 0 1 2 3 4 5; do echo \"== vap$k\"; iw dev wlan$k station dump | "
               "awk '$1 == \"Station\" {print $2}'; done")
    assert res.ok, res.stderr
    found: dict[str, set[str]] = {}
    for block in res.stdout.split("== ")[1:]:
        name, *macs = block.split()
        found[name] = set(macs)
    return found


def _datamodel(q: Qlab) -> dict[str, int]:
    """The firmware's own count (stad's datamodel, fed by the nl80211 HAL from the kernel)."""
    res = q.sh("stacli --socket /run/stad.sock count")
    assert res.ok, res.stderr
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", res.stdout)}


def test_boots_through_labgrid(qlab: Qlab) -> None:
    st = control.status(qlab.root)
    assert st.up and st.state == "shell" and len(st.qemu_pids) == 1
    # the strategy read the boot_id through labgrid's SSHDriver; the guest agrees
    assert qlab.sh("cat /proc/sys/kernel/random/boot_id").stdout.strip() == st.boot_id
    argv = Path(f"/proc/{st.qemu_pids[0]}/cmdline").read_bytes().decode().split("\0")
    port = qlab.endpoint.port
    assert f"user,model=virtio-net-pci,mac=52:54:00:12:34:56,hostfwd=tcp:127.0.0.1:{port}-:22" in argv
    assert argv[argv.index("-accel") + 1].split(",")[0] == qlab.info.accel.name
    # the suite's qlabs run on the real-time clock (tests/qlab_fixtures.TEST_CLOCK): no -icount,
    # two vCPUs, and the profile says so (the default clock's arguments: tests/test_qlab_clock.py)
    assert "-icount" not in argv and argv[argv.index("-smp") + 1] == "2"
    assert qlab.info.clock.kind == "realtime"
    assert "# guest clock: realtime" in qlab.layout.lab_toml.read_text()
    assert any(a.endswith("root.ext4,readonly=on") for a in argv), "the shared base image is read-only"
    # the lab profile names the labgrid env, and its pinned key is the guest's dropbear key
    prof = LabProfile.from_file(qlab.layout.lab_toml)
    assert prof.dut.backend == "labgrid" and prof.dut.labgrid is not None
    ep = resolve_endpoint(LabgridConfig(env=prof.dut.labgrid.env, host_key=prof.dut.labgrid.host_key))
    assert (ep.host, ep.port) == ("127.0.0.1", port)
    key = qlab.sh("dropbearkey -y -f /etc/dropbear/dropbear_ed25519_host_key | grep ^ssh-ed25519")
    assert key.stdout.split()[:2] == prof.dut.labgrid.host_key.split()[:2]
    # the DUT: the Debian kernel, tracefs mounted, no Python, PATH from init, the clients netns
    facts = qlab.sh("uname -r; ls /sys/kernel/tracing/uprobe_events; cat /run/lw/path; "
                    "command -v python3 || echo no-python; ip netns exec clients true && echo netns-ok; "
                    "perf --version")
    assert facts.ok, facts.stderr
    lines = facts.stdout.split()
    assert lines[0] == qlab.info.kernel and "/sys/kernel/tracing/uprobe_events" in lines
    assert "no-python" in lines and "netns-ok" in lines and "/usr/sbin" in facts.stdout
    assert "perf version 6.1" in facts.stdout


def test_associates_18_and_60_real_stations_verified_on_both_sides(qlab: Qlab) -> None:
    for n, per in ((18, 3), (60, 10)):
        held = stations.associate(qlab.endpoint, n)
        assert held.total == n and held.per_vap == dict.fromkeys(VAPS, per)
        # checked again without lw-sta: the APs list exactly stations 1..n, round-robin
        aps = _ap_macs(qlab)
        for k, vap in enumerate(VAPS):
            assert aps[vap] == {_mac(i) for i in range(1, n + 1) if (i - 1) % 6 == k}
        # the firmware's datamodel holds the kernel's stations (the nl80211 HAL's events)
        assert _datamodel(qlab) == {"total": n, **dict.fromkeys(VAPS, per)}
    # a station disconnected behind lw-sta's back fails the check on both sides, by name...
    assert qlab.sh("ip netns exec clients wpa_cli -p /run/lw-sta/ctrl -i sta5 disconnect").ok
    with pytest.raises(stations.StationsError) as caught:
        stations.verify(qlab.endpoint)
    assert any("sta5" in line for line in caught.value.lines)
    # ...and associating again brings it back
    assert stations.associate(qlab.endpoint, 60).total == 60
    assert _mac(5) in _ap_macs(qlab)["vap4"]
    # a disconnect vap0's AP never hears (its client radio's frames lost: another hwsim group)
    # leaves its 10 stations listed; 15 s on, lw-sta tells them again and their AP deauths them
    lose = "/sys/kernel/debug/ieee80211/cli0/hwsim/group"
    assert qlab.sh(f"echo 2 > {lose}").ok
    try:
        res = qlab.sh("lw-sta release 90", timeout=150)
    finally:
        assert qlab.sh(f"echo 1 > {lose}").ok
    assert res.ok and res.stdout.strip().endswith("released 60"), res.stderr
    assert "10 station(s) still listed after 15 s" in res.stderr, res.stderr
    assert "deauthenticated by their AP" in res.stderr and res.seconds >= 15, res
    assert _ap_macs(qlab) == {vap: set() for vap in VAPS}
    # the radio heard again: its stations associate and are released as before
    assert stations.associate(qlab.endpoint, 6).total == 6
    assert stations.release(qlab.endpoint) == 6
    assert _ap_macs(qlab) == {vap: set() for vap in VAPS}
    assert _datamodel(qlab)["total"] == 0


def test_sysupgrade_checks_the_image_then_reboots_into_it(qlab: Qlab, tmp_path: Path) -> None:
    manifest, image = firmware.build(qlab.layout, ["0901"])
    before = control.boot_id(qlab.endpoint)
    # a corrupted image is refused before anything is written
    bad = tmp_path / "bad.img"
    data = bytearray(image.read_bytes())
    data[4096] ^= 0xFF
    bad.write_bytes(bytes(data))
    guestssh.put_sync(qlab.endpoint, bad, "/tmp/bad.img")
    res = qlab.sh("sysupgrade /tmp/bad.img")
    assert res.exit_status == 3 and "corrupt image" in res.stderr
    assert control.boot_id(qlab.endpoint) == before
    # the good one is written to the flash disk and the next boot runs it
    flashed = control.flash(qlab.root, ["0901"])
    assert flashed.boot_id_before == before and flashed.boot_id_after != before
    after = qlab.sh("stad --version; cat /usr/lib/lwfw/manifest; wifi status")
    assert after.ok, after.stderr
    assert f"stad {manifest.git_hash}" in after.stdout
    assert f"build_id={manifest.build_id}" in after.stdout
    # and the reboot drifted the tuning, as the vlab's does: scaling VAPs off
    assert re.findall(r"^(vap\d) .* (DISABLED)", after.stdout, re.M) == [
        ("vap3", "DISABLED"), ("vap4", "DISABLED"), ("vap5", "DISABLED")]


# the guest helpers (q.sh, control.boot_id) run their own event loop: async tests call them in a
# thread
async def _ok(q: Qlab, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    async with open_lab(LabProfile.from_file(q.layout.lab_toml)) as ctx:
        rec = await call_tool(ctx, tool, args or {})
    assert rec.ok, (tool, rec.error)
    assert rec.result is not None
    return rec.result


@pytest.mark.anyio
async def test_build_and_flash_a_patched_image_through_the_labgrid_strategy(qlab: Qlab) -> None:
    """build -> flash ([flash] kind = "labgrid": labwarden's QlabdStrategy packs the build's image
    into the flash format and asks qlabd to run its real strategy -- QEMUDriver off, the image onto
    the flash disk, QEMUDriver on until dropbear answers) -> fingerprint_verify proves the patched
    build runs. One QEMU throughout: a new process, never a second one."""
    prof = LabProfile.from_file(qlab.layout.lab_toml)
    assert prof.flash.kind == "labgrid" and prof.dut.labgrid is not None
    assert "QEMUDriver" not in Path(prof.dut.labgrid.env).read_text()  # labwarden's env starts none
    # what runs now is the previous test's 0901 build: proven first (the board's health check)
    running = await _ok(qlab, "build", {"patches": ["0901"]})
    assert (await _ok(qlab, "fingerprint_verify", {"build_id": running["build_id"]}))["verified"]
    built = await _ok(qlab, "build", {"patches": ["0902"]})
    assert built["git_hash"] != running["git_hash"]
    before = await asyncio.to_thread(control.boot_id, qlab.endpoint)
    qemu_before = procs.qemu_pids(qlab.layout)
    boots = control.status(qlab.root).boots
    flashed = await _ok(qlab, "flash", {"build_id": built["build_id"]})
    assert flashed["flashed"] and flashed["overlay_wiped"]
    after = await asyncio.to_thread(control.boot_id, qlab.endpoint)
    assert after != before, "the strategy must boot the flashed image"
    st = control.status(qlab.root)
    assert st.boots == boots + 1 and st.boot_id == after
    assert len(st.qemu_pids) == 1 and st.qemu_pids != qemu_before  # powered off and on: one QEMU
    verified = await _ok(qlab, "fingerprint_verify", {"build_id": built["build_id"]})
    assert verified["verified"], verified["mismatches"]
    assert unmark(verified["git_hash_running"]) == built["git_hash"] and verified["overlay_empty"]
    # the flash disk holds the image packed on the host from this build, and the guest booted it
    image = Path(built["image"]).with_name(firmware.IMAGE_NAME)
    manifest = (await asyncio.to_thread(qlab.sh, "cat /usr/lib/lwfw/manifest")).stdout
    assert f"build_id={built['build_id']}" in manifest and f"git_hash={built['git_hash']}" in manifest
    data = image.read_bytes()
    with qlab.layout.flash_disk.open("rb") as f:
        assert f.read(len(data)) == data
    status = await _ok(qlab, "lab_status")
    knobs = {k["name"]: k for k in status["knobs"]}
    assert knobs["governor"]["applicable"] is False  # no cpufreq under QEMU
    assert unmark(knobs["governor"]["value"]).startswith("n/a: no cpufreq on this DUT")


@pytest.mark.anyio
async def test_associate_heals_the_flashs_drift_and_moves_stations_held_on_it(qlab: Qlab) -> None:
    """The flash above rebooted the guest: its drift turned the scaling VAPs off and every
    channel to 'auto' (radio2: 11 -> 1). 114 stations held on that drifted topology (by lw-sta
    itself, as `associate` did before it asserted the topology: 38 on each of three VAPs) must
    follow when `associate 114` heals it -- including the 19 whose VAP only changed channel
    (their network blocks pinned the old frequency) -- evenly, checked on both sides."""
    st = await asyncio.to_thread(qlab.sh, "wifi status")
    assert re.findall(r"^(vap\d) .* DISABLED", st.stdout, re.M) == ["vap3", "vap4", "vap5"]
    drifted = await asyncio.to_thread(stations.associate, qlab.endpoint, 114)
    assert drifted.per_vap == dict.fromkeys(VAPS[:3], 38)
    held = await _ok(qlab, "associate", {"stations": 114})
    assert "wireless.vap3.disabled 1 -> 0" in held["healed"], held["healed"]
    assert "wireless.radio2.channel auto -> 11" in held["healed"], held["healed"]
    assert held["per_radio"] == [19] * 6 and held["even_split"] and held["datamodel_count"] == 114
    # the AP side, from the kernel: each AP lists exactly its round-robin share
    aps = await asyncio.to_thread(_ap_macs, qlab)
    for k, vap in enumerate(VAPS):
        assert aps[vap] == {_mac(i) for i in range(1, 115) if (i - 1) % 6 == k}
    # the client side: every station COMPLETED on its own VAP's BSSID (lw-sta verify)
    assert (await asyncio.to_thread(stations.verify, qlab.endpoint)).per_vap == dict.fromkeys(VAPS, 19)
    assert await asyncio.to_thread(_datamodel, qlab) == {"total": 114, **dict.fromkeys(VAPS, 19)}


@pytest.mark.anyio
async def test_power_cycle_through_the_strategy_and_a_refused_image(qlab: Qlab, tmp_path: Path) -> None:
    """A power cycle is labwarden's strategy moved to shell with no image (qlabd: off, then
    shell): a new QEMU, a new boot, the same firmware. A corrupt image is refused by qlabd before
    it stops anything."""
    prof = LabProfile.from_file(qlab.layout.lab_toml)
    assert prof.dut.labgrid is not None
    cfg = LabgridConfig(env=prof.dut.labgrid.env, target=prof.dut.labgrid.target)
    before = await asyncio.to_thread(control.boot_id, qlab.endpoint)
    qemu_before = procs.qemu_pids(qlab.layout)
    await labgrid_transition(cfg, "shell")
    after = await asyncio.to_thread(control.boot_id, qlab.endpoint)
    assert after != before and procs.qemu_pids(qlab.layout) not in ([], qemu_before)
    assert control.status(qlab.root).boot_id == after
    # a corrupted copy of the running image: refused, the guest keeps running the same boot
    good = next(qlab.layout.builds.glob(f"*/{firmware.IMAGE_NAME}"))
    bad = qlab.layout.builds / "corrupt.img"
    data = bytearray(good.read_bytes())
    data[4096] ^= 0xFF
    bad.write_bytes(bytes(data))
    reply = ctlsock.ask(qlab.layout.socket, ctlsock.Request(op="flash", image=str(bad)), timeout=60)
    assert not reply.ok and "corrupt image" in (reply.error or "") and reply.state["state"] == "shell"
    outside = tmp_path / "x.img"
    outside.write_bytes(good.read_bytes())
    reply = ctlsock.ask(qlab.layout.socket, ctlsock.Request(op="flash", image=str(outside)), timeout=60)
    assert not reply.ok and "inside" in (reply.error or "")
    assert await asyncio.to_thread(control.boot_id, qlab.endpoint) == after
    bad.unlink()


async def _power_cycled(qlab: Qlab, prof: LabProfile) -> tuple[PowerCycle, str, str]:
    """The running build verified, the power driver of `prof`'s `[flash] kind` run (what a
    one-place fleet's reproduction runs first, tools/powercycle.py), the build verified again:
    (the cycle, the guest's boot id before, after)."""
    manifest = (await asyncio.to_thread(qlab.sh, "cat /usr/lib/lwfw/manifest")).stdout
    found = re.search(r"^build_id=(\w+)", manifest, re.M)
    assert found, manifest
    running = found.group(1)
    before = await asyncio.to_thread(control.boot_id, qlab.endpoint)
    async with open_lab(prof) as ctx:
        rec = await call_tool(ctx, "fingerprint_verify", {"build_id": running})
        assert rec.ok and rec.result and rec.result["verified"], rec
        cycle = await power_cycle(ctx)
        assert ctx.peek_state().verified_build == running
    assert cycle.done and cycle.verified == running, cycle
    return cycle, before, await asyncio.to_thread(control.boot_id, qlab.endpoint)


@pytest.mark.long  # one more reboot of the module's guest; run with --long
@pytest.mark.anyio
async def test_the_power_driver_cycles_a_labgrid_dut_and_verifies_it_again(qlab: Qlab) -> None:
    """For `[flash] kind = "labgrid"` the Strategy from a fresh target with no image -- a new
    boot -- then the build that ran is fingerprint-verified again."""
    cycle, before, after = await _power_cycled(qlab, LabProfile.from_file(qlab.layout.lab_toml))
    assert cycle.how.endswith("Strategy -> shell, no image"), cycle.how
    assert after != before and control.status(qlab.root).boot_id == after


@pytest.mark.long  # one more reboot of the module's guest; run with --long
@pytest.mark.anyio
async def test_the_power_driver_reboots_a_sysupgrade_dut_and_verifies_it_again(qlab: Qlab) -> None:
    """For `[flash] kind = "sysupgrade"` (a DUT that flashes itself: an OpenWrt router, or a
    qlab place of a fleet) a power cycle is the DUT's own `reboot`: back when its boot id
    changed and the target is a new instance, then the build that ran is fingerprint-verified
    again. The qlab's guest reboots for real: its kernel starts again inside the same QEMU
    (nothing on the host powers it), which qlabd's state does not see."""
    text = qlab.layout.lab_toml.read_text()
    flash = re.search(r"^\[flash\]\n(?:(?!\[).*\n)*", text, re.M)  # to the next section
    assert flash, text
    lab = qlab.layout.lab_toml.with_name("lab-sysupgrade.toml")
    lab.write_text(text.replace(flash.group(0), '[flash]\nkind = "sysupgrade"\ncommand = ["sysupgrade"]\n'
                                                'timeout_s = 300\n\n'))
    prof = LabProfile.from_file(lab)
    assert prof.flash.kind == "sysupgrade"
    qemu = procs.qemu_pids(qlab.layout)
    cycle, before, after = await _power_cycled(qlab, prof)
    assert cycle.how.startswith("the DUT's own `reboot` (a new boot)"), cycle.how
    assert after != before and procs.qemu_pids(qlab.layout) == qemu


@pytest.mark.anyio
async def test_flame_graph_has_kernel_frames_under_the_daemons_netlink_calls(qlab: Qlab) -> None:
    """perf in the guest, kernel stacks from the guest's kallsyms, symfs from the image's own
    files (its libc, its libnl), with 18 real stations held by the wpa_supplicant load."""
    prof = await _ok(qlab, "measure", {"stations": 18, "window_s": 4, "reps": 1})
    assert prof["fingerprint_verified"] and prof["cpu_pct"]["mean"] > 1, prof
    assert prof["counters"]["rpc_calls"] > 0, prof  # the uprobe counter in the guest kernel
    assert (await asyncio.to_thread(_ap_macs, qlab))["vap0"] == {_mac(i) for i in (1, 7, 13)}  # held for real
    sym = await _ok(qlab, "symbolize", {"profile_id": prof["profile_id"],
                                        "functions": ["netlink_sendmsg", "nl80211_get_station"]})
    shares = {f["name"]: f["total_pct"] for f in sym["functions"]}
    assert shares["netlink_sendmsg"] > 1 and shares["nl80211_get_station"] > 0, shares
    folded = (Path(sym["svg"]).parent / "stacks.folded").read_text().splitlines()
    # the HAL's GET_STATION round trip, through the image's libnl, into the kernel's nl80211
    chain = ["hal_nl_roundtrip", "nl_send", "netlink_sendmsg", "genl_rcv_msg", "nl80211_get_station"]
    assert any(_in_order(line.split(" ")[0].split(";"), chain) for line in folded), folded[:5]
    assert "nl80211_get_station" in Path(sym["svg"]).read_text()
    symfs = Path(sym["symfs"])
    assert list(symfs.rglob("libnl-genl-3.so*")) and list(symfs.rglob("libc.so.6"))
    assert sym["unknown_pct"] < 20, sym["unresolved_top"]


def _in_order(frames: list[str], chain: list[str]) -> bool:
    it = iter(frames)
    return all(any(f == want for f in it) for want in chain)


@pytest.mark.anyio
async def test_sigstop_of_the_monitor_collapses_the_daemons_cpu(qlab: Qlab) -> None:
    att = await _ok(qlab, "attribute", {"suspect": "stamon", "window_s": 4, "baseline_s": 4})
    print(f"\nqlab attribute: {att}")  # shown with a failure: pytest's repr cuts the dict
    assert att["resumed"], att
    # the monitor drives most of stad's CPU. Beside two CPU hogs and the light tests the drop read
    # 100.0% three times out of three (during 0.0%, the pause held); one full suite run read 73.5%
    # (23% -> 6%; whether the pause held was not printed then) -- so the bound is 60%, not ~100%.
    # A pause the loaded guest did not hold (pause_held false) mixes running time into `during`
    assert att["before_pct"] > 2 and att["drop_pct"] > 60, att
    # the load driver disassociates cleanly: the firmware and every AP see no station
    released = await _ok(qlab, "associate", {"stations": 0})
    assert released["datamodel_count"] == 0
    assert await asyncio.to_thread(_ap_macs, qlab) == {vap: set() for vap in VAPS}


@pytest.mark.anyio
async def test_a_wrong_image_fails_verification(qlab: Qlab) -> None:
    """The build that does not run (0901; 0902 runs) is refused by its fingerprint."""
    wrong = await _ok(qlab, "build", {"patches": ["0901"]})
    out = await _ok(qlab, "fingerprint_verify", {"build_id": wrong["build_id"]})
    assert not out["verified"]
    checks = {m["check"] for m in out["mismatches"]}
    assert "git_hash" in checks and "sha256" in checks, out["mismatches"]
    assert out["git_hash_running"] != wrong["git_hash"]


def test_a_qlab_place_joins_the_fleet(qlab: Qlab, tmp_path: Path) -> None:
    """This qlab as the place of a fleet (qlab.fleet.join: what `qlab up --places N` does after the
    boots): a real coordinator and exporter; the fleet profile is a valid lab profile whose
    lease reaches the guest through the place (its boot_id over SSH is the qlab's), and whose
    calls (as the loop makes them: on a leased place, with the place's own profile) build, flash
    and prove a patched image there -- a new boot, the build's fingerprint; leaving the fleet
    stops the coordinator and exporter and leaves the qlab running."""
    import json

    from labwarden.core.events import ToolCalled
    from labwarden.lab.fleet import Fleet
    from labwarden.lab.host.pidfile import alive
    from labwarden.qlab import fleet as qlab_fleet
    from labwarden.runtime.fleet import open_fleet
    from labwarden.transcripts.audit import audit
    from labwarden.transcripts.store import TranscriptStore

    dir = tmp_path / "qfleet"
    try:
        info = qlab_fleet.join(dir, {"qlab-0": qlab.info})
        profile = LabProfile.from_file(info.lab_toml)
        assert profile.dut.backend == "labgrid" and profile.flash.kind == "sysupgrade"
        assert profile.dut.labgrid is not None and profile.dut.labgrid.places == ["qlab-0"]
        assert profile.dut.labgrid.place_profiles == {"qlab-0": qlab.info.lab_toml}
        own = LabProfile.from_file(qlab.info.lab_toml).dut.place  # the qlab's own: under its place
        assert own is not None and (own.name, own.coordinator) == ("qlab-0", info.coordinator)
        cfg = LabgridConfig(**profile.dut.labgrid.model_dump())

        async def boot_id_through_the_place() -> tuple[str | None, str]:
            lease = await Fleet(cfg, user="q", host="h").lease(timeout_s=10)
            try:
                res = await guestssh.run(lease.endpoint(), ["cat", "/proc/sys/kernel/random/boot_id"], 60)
                return lease.place, res.stdout.strip()
            finally:
                await lease.release()

        place, boot_id = asyncio.run(boot_id_through_the_place())
        assert place == "qlab-0" and boot_id == control.status(qlab.root).boot_id

        async def flash_through_the_fleet() -> tuple[str, list[dict[str, Any]]]:
            async with open_fleet(profile, client="test") as (home, pool):
                async def ok(tool: str, args: dict[str, Any]) -> dict[str, Any]:
                    rec = await pool.call(tool, args)  # on a leased place, as the loop's calls
                    assert rec.ok and rec.result is not None, (tool, rec.error)
                    return rec.result

                running = await ok("build", {"patches": ["0902"]})  # what the tests above left
                proved_running = await ok("fingerprint_verify", {"build_id": running["build_id"]})
                built = await ok("build", {"patches": ["0901", "0902"]})
                flashed = await ok("flash", {"build_id": built["build_id"]})
                proved = await ok("fingerprint_verify", {"build_id": built["build_id"]})
                assert home.session_id is not None
                return home.session_id, [proved_running, built, flashed, proved]

        sid, (proved_running, built, flashed, proved) = asyncio.run(flash_through_the_fleet())
        with TranscriptStore(profile.data_dir() / "transcripts.db") as store:
            assert audit(store, sid).ok
            calls = [e.event for e in store.events(sid)
                     if isinstance(e.event, ToolCalled) and e.event.parent_id is None]
        assert [(c.call.tool, c.place) for c in calls if c.call.tool != "build"] == [
            ("fingerprint_verify", "qlab-0"), ("flash", "qlab-0"), ("fingerprint_verify", "qlab-0")]
        assert proved_running["verified"] and flashed["flashed"], (proved_running, flashed)
        assert proved["verified"] and unmark(proved["git_hash_running"]) == built["git_hash"], proved
        assert control.boot_id(qlab.endpoint) != boot_id  # the flash's boot
        hub_pids = json.loads((dir / "labgrid" / "hub.json").read_text())["pids"]
        res = CliRunner().invoke(app, ["qlab", "status", "--json", "--dir", str(dir)])
        assert res.exit_code == 0 and json.loads(res.output)["places"]["qlab-0"]["state"] == "shell"
    finally:
        qlab_fleet.down(dir, keep_qlabs=True)
    assert not any(alive(pid) for pid in hub_pids.values()) and not (dir / "labgrid").exists()
    assert control.status(qlab.root).up
    assert LabProfile.from_file(qlab.info.lab_toml).dut.place is None  # on its own again


def test_down_leaves_no_qemu(qlab: Qlab) -> None:
    runner = CliRunner()
    pids = procs.qemu_pids(qlab.layout)
    assert pids and procs.daemon_pid(qlab.layout) is not None
    res = runner.invoke(app, ["qlab", "down", "--dir", str(qlab.root)])
    assert res.exit_code == 0, res.output
    assert procs.qemu_pids(qlab.layout) == [] and procs.daemon_pid(qlab.layout) is None
    assert not any(procs.alive(p) for p in pids)
    res = runner.invoke(app, ["qlab", "status", "--dir", str(qlab.root)])
    assert res.exit_code == 1 and "down" in res.output
