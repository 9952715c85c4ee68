"""Bring a qlab up and down, power-cycle it, and report its status (host side).

`up`: the guest image (built and cached if missing), KVM or TCG (probed), the firmware built with
the nl80211 HAL and written to a fresh flash disk, a fresh data disk (so the first boot is
factory: no reboot drift), the labgrid env YAML, then the daemon that holds the labgrid target
(`labwarden.qlab.daemon`) moves it to `shell`; `up` waits until the APs are up and writes the lab
profile. Anything `up` started is stopped again if a later step fails.
`down`: the daemon moves the target to `off` (QEMU quits) and exits; a QEMU left behind (its
daemon killed) is stopped by its command line. Nothing of the qlab keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import asyncssh
from pydantic import BaseModel, Field

from labwarden.core.devtext import quote
from labwarden.core.errors import LabError
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.statedir import torn_down_on_failure
from labwarden.qlab import accel as accel_mod
from labwarden.qlab import clock as clock_mod
from labwarden.qlab import envyaml, firmware, guestssh, image, procs, profile_writer, traffic
from labwarden.qlab.layout import QlabLayout

Progress = Callable[[str], None]
BOOT_TIMEOUT_S = 300.0
WIFI_TIMEOUT_S = 120


class QlabError(LabError):
    """A qlab that cannot be brought up (or down), with what to look at."""

    kind = "device"


class QlabInfo(BaseModel):
    root: str
    ssh: str = Field(description="host:port of dropbear (QEMU hostfwd)")
    lab_toml: str
    env_yaml: str
    image: str = Field(description="image key (image-KEY in the cache)")
    kernel: str
    accel: accel_mod.Accel
    clock: clock_mod.GuestClock
    build_id: str
    boot_id: str
    timings: dict[str, float] = Field(description="seconds: image, firmware, boot, wifi, total")


class QlabStatus(BaseModel):
    root: str
    up: bool
    state: str = Field(description="the daemon's: starting, booting, shell, off, stopping, "
                       "stopped, dead, error; `down` if there is no daemon")
    daemon_pid: int | None = None
    qemu_pids: list[int] = Field(default_factory=list)
    ssh: str | None = None
    boot_id: str | None = None
    boots: int = 0
    error: str | None = None
    guest: dict[str, str] = Field(default_factory=dict, description="from the guest when asked: "
                                  "uname, uptime, wifi status, the firmware's count")


def endpoint(layout: QlabLayout) -> SshEndpoint:
    """The guest's SSH endpoint, from the env YAML and the image manifest (as the profile pins it)."""
    from labwarden.lab.labgrid import LabgridConfig, resolve_endpoint

    host_key = (layout.root / "keys" / "host_key.pub").read_text().strip()
    return resolve_endpoint(LabgridConfig(env=str(layout.env_yaml), host_key=host_key))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _state(layout: QlabLayout) -> dict[str, Any]:
    try:
        return dict(json.loads(layout.state_file.read_text()))
    except (OSError, ValueError):
        return {}


def _tail(path: Path, n: int = 8) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def _fail(layout: QlabLayout, problem: str) -> QlabError:
    return QlabError(problem, f"see {layout.console_log} and {layout.daemon_log}",
                     lines=_tail(layout.daemon_log, 4) + _tail(layout.console_log, 8))


def _data_disk(layout: QlabLayout, size_mb: int = 256) -> None:
    """A fresh persistent overlay: factory state, and the first boot applies no drift."""
    layout.data_disk.unlink(missing_ok=True)
    with layout.data_disk.open("wb") as f:
        f.truncate(size_mb << 20)
    out = subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "qlab-data", str(layout.data_disk)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise QlabError(f"mkfs.ext4 of the data disk failed: {quote(out.stderr)}",
                        "check e2fsprogs (`make setup`)")


def _wait_state(layout: QlabLayout, daemon: subprocess.Popen[bytes] | None, want: set[str],
                timeout: float, seq: int | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = _state(layout)
        if st.get("state") in ("error", "dead"):
            raise _fail(layout, f"the qlab failed: {st.get('error')}")
        if st.get("state") in want and (seq is None or st.get("seq", 0) > seq):
            return st
        if daemon is not None and daemon.poll() is not None:
            raise _fail(layout, f"the qlab daemon exited (code {daemon.returncode})")
        if daemon is None and procs.daemon_pid(layout) is None:
            raise _fail(layout, "the qlab daemon is gone")
        time.sleep(0.1)
    raise _fail(layout, f"no {'/'.join(sorted(want))} state after {timeout:.0f} s "
                f"(state {_state(layout).get('state')})")


def up(root: str | os.PathLike[str], *, accel: Literal["auto", "kvm", "tcg"] = "auto",
       clock: str | None = None, memory: str = "512M", smp: int | None = None, port: int = 0,
       patches: list[str] | None = None,
       extra_nics: list[envyaml.Nic] | None = None, traffic_router: bool = False,
       progress: Progress = lambda _m: None) -> QlabInfo:
    """`traffic_router`: the traffic variant (qlab/traffic.py): lan/wan NICs on taps bridged to the
    host netns lwlan/lwwan, the guest routing between them, and a profile with [load] iperf3.
    `clock`: the guest's clock (clock.parse's forms); None is the default (clock.for_accel).
    `smp`: vCPUs; None is 1 on the icount clock (QEMU 7.2 hangs bringing up a second vCPU
    under -icount), else 2."""
    layout = QlabLayout.at(root)
    t0 = time.monotonic()
    running = procs.daemon_pid(layout)
    if running is not None:
        raise QlabError(f"a qlab is already up in {layout.root} (daemon pid {running})",
                        f"use it (lab profile {layout.lab_toml}), or `labwarden qlab down --dir "
                        f"{layout.root}` first")
    for d in (layout.root, layout.run_dir, layout.logs, layout.keys):
        d.mkdir(parents=True, exist_ok=True)
    for stale in (layout.state_file, layout.console_log):
        stale.unlink(missing_ok=True)
    timings: dict[str, float] = {}
    with torn_down_on_failure(layout.root, down):
        img = image.ensure(lambda m: progress(f"image: {m}"))
        timings["image"] = round(time.monotonic() - t0, 2)
        progress("choosing the accelerator")
        chosen = accel_mod.choose(img, accel)
        progress(f"{chosen.name}: {chosen.reason}")
        guest_clock = clock_mod.for_accel(clock, chosen.name, traffic=traffic_router)
        smp = smp or clock_mod.default_smp(guest_clock)
        clock_mod.check_smp(guest_clock, smp)
        t1 = time.monotonic()
        progress("building the firmware (nl80211 HAL)")
        firmware.init_repo(layout)
        manifest, fw_image = firmware.build(layout, patches)
        firmware.write_flash(layout.flash_disk, fw_image)
        _data_disk(layout)
        timings["firmware"] = round(time.monotonic() - t1, 2)
        port = port or _free_port()
        (layout.keys / "host_key.pub").write_text(img.host_key + "\n")
        layout.known_hosts.write_text(f"[127.0.0.1]:{port} {img.host_key}\n")
        nics = list(extra_nics or [])
        if traffic_router:
            progress(f"traffic: host netns {', '.join(s.netns for s in traffic.SIDES)} and taps")
            traffic.host_up(layout)
            nics += traffic.nics()
        spec = envyaml.GuestSpec(memory=memory, smp=smp, accel=chosen, clock=guest_clock,
                                 ssh_port=port,
                                 extra_nics=nics)
        envyaml.write(layout, img, spec)
        progress(f"booting ({chosen.name}, clock {guest_clock.spec}, {memory}, {smp} vCPUs) "
                 "through labgrid")
        t2 = time.monotonic()
        out = layout.daemon_log.with_suffix(".out").open("ab")
        daemon = subprocess.Popen([sys.executable, "-m", "labwarden.qlab.daemon", str(layout.root)],
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                  start_new_session=True, cwd=str(layout.root))
        out.close()
        st = _wait_state(layout, daemon, {"shell"}, BOOT_TIMEOUT_S)
        timings["boot"] = round(time.monotonic() - t2, 2)
        progress(f"ssh answers after {timings['boot']:.1f} s; waiting for the APs")
        t3 = time.monotonic()
        res = guestssh.run_sync(endpoint(layout), ["wifi", "wait", str(WIFI_TIMEOUT_S)],
                                timeout=WIFI_TIMEOUT_S + 30)
        if not res.ok:
            raise _fail(layout, f"the APs did not come up: {quote(res.stderr)}")
        _wait_firmware(layout)
        timings["wifi"] = round(time.monotonic() - t3, 2)
        if traffic_router:
            route = guestssh.run_sync(endpoint(layout), ["lw-route", "status"], timeout=30)
            if not route.ok or "lan=up" not in route.stdout or "wan=up" not in route.stdout:
                raise _fail(layout, "the guest does not route lan -> wan: "
                            f"{quote(route.stdout + route.stderr)} (its /tmp/log/route.log says why)")
        profile_writer.write(layout, img, manifest,
                             load_section=traffic.LOAD_SECTION if traffic_router else None,
                             clock=guest_clock)
        layout.record_first_flash(manifest.build_id)
    timings["total"] = round(time.monotonic() - t0, 2)
    return QlabInfo(root=str(layout.root), ssh=f"127.0.0.1:{port}", lab_toml=str(layout.lab_toml),
                    env_yaml=str(layout.env_yaml), image=img.key, kernel=img.kernel_version,
                    accel=chosen, clock=guest_clock, build_id=manifest.build_id,
                    boot_id=str(st.get("boot_id")),
                    timings=timings)


def status(root: str | os.PathLike[str], *, ask_guest: bool = False) -> QlabStatus:
    layout = QlabLayout.at(root)
    pid = procs.daemon_pid(layout)
    st = _state(layout)
    result = QlabStatus(root=str(layout.root), up=pid is not None and st.get("state") == "shell",
                        state=st.get("state", "down") if pid is not None else "down",
                        daemon_pid=pid, qemu_pids=procs.qemu_pids(layout), boot_id=st.get("boot_id"),
                        boots=st.get("boots", 0), error=st.get("error"))
    if pid is None and st.get("state") in ("dead", "error"):
        result.state, result.error = st["state"], st.get("error")
    if result.up:
        ep = endpoint(layout)
        result.ssh = f"{ep.host}:{ep.port}"
        if ask_guest:
            for key, argv in (("uname", ["uname", "-r"]), ("uptime", ["uptime"]),
                              ("wifi", ["wifi", "status"]),
                              ("firmware", ["sh", "-c", "stacli --socket /run/stad.sock version "
                                            "&& stacli --socket /run/stad.sock count"])):
                with contextlib.suppress(Exception):
                    res = guestssh.run_sync(ep, argv, timeout=30)
                    result.guest[key] = (res.stdout or res.stderr).strip()
    return result


def _wait_firmware(layout: QlabLayout) -> None:
    """After the APs: the firmware's daemon answers too (firmware.READY_SH)."""
    res = guestssh.run_sync(endpoint(layout), ["sh", "-c", firmware.READY_SH],
                            timeout=firmware.READY_S + 30)
    if not res.ok:
        raise _fail(layout, f"the firmware did not start after the boot: {quote(res.stderr)}")


def transition(root: str | os.PathLike[str], to: Literal["off", "shell", "cycle"],
               timeout: float = BOOT_TIMEOUT_S) -> QlabStatus:
    """Move the labgrid target through its strategy (held by the daemon): off, shell, or a power
    cycle (off, then shell); returns when the daemon reports it done."""
    layout = QlabLayout.at(root)
    pid = procs.daemon_pid(layout)
    if pid is None:
        raise QlabError(f"no qlab is up in {layout.root}", f"labwarden qlab up --dir {layout.root}")
    seq = int(_state(layout).get("seq", 0))
    os.kill(pid, {"off": signal.SIGUSR1, "shell": signal.SIGUSR2, "cycle": signal.SIGHUP}[to])
    _wait_state(layout, None, {"off" if to == "off" else "shell"}, timeout, seq=seq)
    return status(root)


def down(root: str | os.PathLike[str], timeout: float = 60.0) -> list[int]:
    """Stop the daemon (QEMU quits through the strategy) and any QEMU of this qlab left behind.
    Returns the pids stopped."""
    layout = QlabLayout.at(root)
    stopped = []
    pid = procs.daemon_pid(layout)
    if pid is not None and procs.stop(pid, timeout=timeout):
        stopped.append(pid)
    for qemu in procs.qemu_pids(layout):  # its daemon was killed, or did not stop it in time
        if procs.stop(qemu, timeout=5):
            stopped.append(qemu)
    layout.daemon_pid.unlink(missing_ok=True)
    if traffic.is_traffic(layout):  # after QEMU: its taps are free to go
        traffic.host_down(layout)
    return stopped


class Flashed(BaseModel):
    build_id: str
    image: str
    boot_id_before: str
    boot_id_after: str
    timings: dict[str, float] = Field(description="seconds: upload, sysupgrade, reboot (until ssh "
                                      "answers with a new boot_id), wifi (APs up)")


def boot_id(ep: SshEndpoint, connect_timeout: float = guestssh.CONNECT_TIMEOUT_S,
            connect_tries: int = guestssh.CONNECT_TRIES) -> str:
    res = asyncio.run(guestssh.run(ep, ["cat", "/proc/sys/kernel/random/boot_id"], timeout=30,
                                   connect_timeout=connect_timeout, connect_tries=connect_tries))
    if not res.ok:
        raise QlabError(f"cannot read the guest's boot_id: {quote(res.stderr)}", "is the qlab up?")
    return res.stdout.strip()


def wait_new_boot(ep: SshEndpoint, old: str, timeout: float = BOOT_TIMEOUT_S) -> str:
    """The guest's boot_id once it differs from `old` (it rebooted and dropbear answers)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, asyncssh.Error, TimeoutError, QlabError):  # rebooting
            # while the guest boots, QEMU's user-mode network accepts the TCP connection and
            # nothing answers it: a short connect timeout keeps the polling fast
            new = boot_id(ep, connect_timeout=3, connect_tries=1)
            if new != old:
                return new
        time.sleep(0.5)
    raise QlabError(f"the guest did not come back with a new boot_id in {timeout:.0f} s",
                    "see the console log in the qlab's logs/")


def flash(root: str | os.PathLike[str], patches: list[str] | None = None,
          image_path: Path | None = None) -> Flashed:
    """sysupgrade on the guest: build (cached) and pack the firmware, copy the image to the
    guest's /tmp, run its sysupgrade (it writes the flash disk and reboots), and wait for the next
    boot (a new boot_id) and its APs. `image_path` flashes a given file instead of a build."""
    layout = QlabLayout.at(root)
    t0 = time.monotonic()
    if image_path is None:
        manifest, image_path = firmware.build(layout, patches)
        build_id = manifest.build_id
    else:
        build_id = "?"
    ep = endpoint(layout)
    before = boot_id(ep)
    timings = {"build": round(time.monotonic() - t0, 2)}
    t = time.monotonic()
    guestssh.put_sync(ep, image_path, "/tmp/fw.img")
    timings["upload"] = round(time.monotonic() - t, 2)
    t = time.monotonic()
    try:
        res: guestssh.GuestResult | None = guestssh.run_sync(ep, ["sysupgrade", "/tmp/fw.img"],
                                                             timeout=120)
    except (OSError, asyncssh.Error, TimeoutError):
        res = None  # the session dropped while the guest went down: what a flash looks like
    if res is not None and res.exit_status not in (0, -1):
        raise QlabError(f"sysupgrade refused the image: {quote(res.stderr)}",
                        "flash an image built for this board (labwarden.qlab.firmware.pack)")
    timings["sysupgrade"] = round(time.monotonic() - t, 2)
    t = time.monotonic()
    after = wait_new_boot(ep, before)
    timings["reboot"] = round(time.monotonic() - t, 2)
    t = time.monotonic()
    wifi = guestssh.run_sync(ep, ["wifi", "wait", str(WIFI_TIMEOUT_S)], timeout=WIFI_TIMEOUT_S + 30)
    if not wifi.ok:
        raise _fail(layout, f"the APs did not come up after flashing: {quote(wifi.stderr)}")
    _wait_firmware(layout)
    timings["wifi"] = round(time.monotonic() - t, 2)
    return Flashed(build_id=build_id, image=str(image_path), boot_id_before=before,
                   boot_id_after=after, timings=timings)
