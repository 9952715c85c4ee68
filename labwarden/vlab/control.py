"""Bring a vlab up and down, reboot it, load it, and report its status (host side).

Every step that starts something is undone if a later step fails: nothing half-started is left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import asyncssh
from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.lab import uci
from labwarden.lab.host import cpupin
from labwarden.lab.host.stasim import LoadError, StasimLoad
from labwarden.lab.statedir import torn_down_on_failure
from labwarden.vlab import confine, firmware, procs, profile_writer, rpc, tuning
from labwarden.vlab.layout import SERVICES, VlabLayout

TOOLCHAIN = ("gcc", "make", "git", "strip", "objcopy", "tar")


class VlabError(LabError):
    """A failure with what went wrong and what to do about it."""


class VlabInfo(BaseModel):
    root: str
    ssh: str = Field(description="host:port of the DUT's SSH endpoint")
    lab_toml: str
    client_key: str
    git_hash: str
    build_id: str
    pids: dict[str, int]
    notes: list[str] = Field(default_factory=list)


class VlabStatus(BaseModel):
    root: str
    up: bool
    dutd_pid: int | None = None
    ssh_port: int | None = None
    services: dict[str, int | None] = Field(default_factory=dict, description="name -> pid")
    running_version: str | None = Field(None, description="`stad --version` of the binary")
    associated: dict[str, int] | None = Field(None, description="datamodel count per VAP")
    stasim_pid: int | None = None
    state: tuning.Tuning | None = None


def _check_toolchain() -> None:
    missing = [t for t in TOOLCHAIN if shutil.which(t) is None]
    if missing:
        raise VlabError(f"missing build tools: {', '.join(missing)} (the vlab builds its "
                        "firmware from C sources)",
                        "apt-get install gcc make git binutils tar  (or run `make setup`)")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _keys(layout: VlabLayout) -> None:
    layout.keys.mkdir(parents=True, exist_ok=True)
    layout.keys.chmod(0o700)
    for path in (layout.host_key, layout.client_key):
        if not path.exists():
            key = asyncssh.generate_private_key("ssh-ed25519")
            key.write_private_key(str(path))
            key.write_public_key(str(path) + ".pub")
            path.chmod(0o600)
    shutil.copyfile(str(layout.client_key) + ".pub", layout.authorized_keys)


def host_key_line(layout: VlabLayout) -> str:
    return Path(str(layout.host_key) + ".pub").read_text().split("\n")[0].strip()


def _calibrate(layout: VlabLayout) -> None:
    """Measure the work loop on this CPU once per vlab; stored so reboots keep the same cost."""
    path = layout.config_dir / "system"
    sections = uci.load(path) if path.exists() else [uci.Section("system", "main")]
    main = uci.get(sections, "main")
    if "work_per_us" in main.options:
        return
    out = subprocess.run([str(layout.binary("stad")), "--calibrate"], capture_output=True,
                         text=True, env=layout.dut_env(), timeout=60)
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise VlabError(f"stad --calibrate failed: {out.stderr.strip()[-300:]}",
                        "check the firmware build log in the state dir's builds/")
    main.options["work_per_us"] = out.stdout.strip()
    uci.save(path, sections)


def flash_local(layout: VlabLayout, manifest: firmware.BuildManifest) -> None:
    """Install an image with the DUT's own sysupgrade script (reboots the DUT if it runs)."""
    out = subprocess.run(["sh", str(layout.rootfs / "sbin" / "sysupgrade"), manifest.image],
                         capture_output=True, text=True, env=layout.dut_env(), timeout=120)
    if out.returncode != 0:
        raise VlabError(f"sysupgrade failed: {out.stderr.strip()}", "rebuild the image")


def _install_dut_scripts(layout: VlabLayout) -> None:
    src = Path(__file__).with_name("dut_sbin")
    for script in src.iterdir():
        dest = layout.rootfs / "sbin" / script.name
        shutil.copyfile(script, dest)
        dest.chmod(0o755)


def up(root: str | os.PathLike[str], port: int = 0, patches: list[str] | None = None,
       progress: Callable[[str], None] = lambda _msg: None, cpu: int | None = None) -> VlabInfo:
    """Bring the vlab up; `cpu`: pin the DUT (its daemon and all it starts) to that CPU."""
    layout = VlabLayout.at(root)
    notes: list[str] = []
    _check_toolchain()
    pid = procs.read_pid(layout.dutd_pid)
    if procs.alive(pid):
        port_now = procs.read_pid(layout.ssh_port_file)
        raise VlabError(f"a vlab is already up in {layout.root} (dutd pid {pid}, ssh "
                        f"127.0.0.1:{port_now})",
                        f"use it (lab profile {layout.lab_toml}), or `labwarden vlab down "
                        f"--dir {layout.root}` first")
    if pid is not None:
        layout.dutd_pid.unlink()
        notes.append(f"removed stale pid file (dutd pid {pid} was not running)")
        # a dutd killed outright may leave its services running (unconfined, or a service that
        # outlived its namespace): stop them, or the old stad would answer on the new one's
        # socket (the new dutd empties the services' cgroups too)
        orphans = [p for p in procs.processes_under(layout.root) if procs.stop(p, timeout=2)]
        if orphans:
            notes.append(f"stopped {len(orphans)} process(es) the dead dutd left running: "
                         f"{', '.join(map(str, orphans))}")
    if port and not _port_free(port):
        raise VlabError(f"port {port} on 127.0.0.1 is in use",
                        "pick another --port, or omit it to take a free one")
    layout.root.mkdir(parents=True, exist_ok=True)
    with torn_down_on_failure(layout.root, down):
        progress("provisioning the DUT state")
        if not (layout.config_dir / "procmgr").exists():
            tuning.provision(layout)
        _install_dut_scripts(layout)
        _keys(layout)
        progress("building firmware")
        firmware.init_repo(layout)
        manifest, _cached = firmware.build(layout, patches)
        progress(f"flashing build {manifest.build_id}")
        t_flash = time.monotonic()
        flash_local(layout, manifest)
        flash_s = time.monotonic() - t_flash  # the same install the flash tool does
        layout.loadgen.mkdir(exist_ok=True)
        for name in firmware.LOADGEN:
            shutil.copy2(Path(manifest.image).parent / name, layout.loadgen / name)
        progress("calibrating the work loop")
        _calibrate(layout)
        progress("starting the DUT (process manager + ssh)")
        pin = None
        if cpu is not None:
            pin = cpupin.pin_for(str(layout.root), cpu)
            cpupin.save(pin, layout.run_dir / "cpu.pin")
            notes.append(f"DUT pinned to CPU {cpu} by {pin.how}")
        info = _start_dutd(layout, port, pin)
        profile_writer.write(layout, info_port=info, manifest=manifest)
        layout.record_first_flash(manifest.build_id, flash_s)
    return VlabInfo(root=str(layout.root), ssh=f"127.0.0.1:{info}", lab_toml=str(layout.lab_toml),
                    client_key=str(layout.client_key), git_hash=manifest.git_hash,
                    build_id=manifest.build_id, pids=_service_pids(layout), notes=notes)


def _start_dutd(layout: VlabLayout, port: int, pin: cpupin.Pin | None = None) -> int:
    with contextlib.suppress(FileNotFoundError):
        layout.ssh_port_file.unlink()
    out = (layout.logs / "dutd.out").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "labwarden.vlab.dutd", str(layout.root),
                             "--port", str(port)], stdin=subprocess.DEVNULL, stdout=out,
                            stderr=out, start_new_session=True, cwd=str(layout.root),
                            preexec_fn=pin.preexec() if pin else None)
    out.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if layout.ssh_port_file.exists() and layout.ssh_port_file.read_text().strip():
            bound = int(layout.ssh_port_file.read_text())
            known = f"[127.0.0.1]:{bound} {host_key_line(layout)}\n"
            layout.known_hosts.write_text(known)
            return bound
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    tail = (layout.logs / "dutd.log").read_text().splitlines()[-5:] if (
        layout.logs / "dutd.log").exists() else []
    proc.kill()
    raise VlabError("the DUT daemon did not come up: " + " | ".join(tail),
                    f"see {layout.logs / 'dutd.log'} and {layout.logs / 'dutd.out'}")


def _service_pids(layout: VlabLayout) -> dict[str, int]:
    pids = {}
    for name in SERVICES:
        pid = procs.read_pid(layout.run_dir / f"{name}.pid")
        if procs.alive(pid):
            assert pid is not None
            pids[name] = pid
    return pids


def down(root: str | os.PathLike[str]) -> list[int]:
    """Stop the load, the DUT daemon and anything left under the state dir. Returns pids stopped."""
    layout = VlabLayout.at(root)
    stopped = []
    for pidfile in (layout.stasim_pid, layout.dutd_pid):
        pid = procs.read_pid(pidfile)
        if procs.stop(pid, timeout=10):
            assert pid is not None
            stopped.append(pid)
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
    for pid in procs.processes_under(layout.root):  # orphans of a killed daemon
        if procs.stop(pid, timeout=2):
            stopped.append(pid)
    stopped += confine.end_leftovers(layout)  # and all they started (their cgroups)
    for name in SERVICES:
        with contextlib.suppress(FileNotFoundError):
            (layout.run_dir / f"{name}.pid").unlink()
    with contextlib.suppress(FileNotFoundError):
        layout.ssh_port_file.unlink()
    pin = cpupin.load(layout.run_dir / "cpu.pin")
    if pin is not None:
        for pid in pin.tasks():  # anything else the DUT started, wherever its executable lives
            if procs.stop(pid, timeout=2):
                stopped.append(pid)
        cpupin.unpin(pin)
        (layout.run_dir / "cpu.pin").unlink()
    return stopped


def status(root: str | os.PathLike[str]) -> VlabStatus:
    layout = VlabLayout.at(root)
    pid = procs.read_pid(layout.dutd_pid)
    st = VlabStatus(root=str(layout.root), up=procs.alive(pid))
    if not st.up:
        return st
    st.dutd_pid = pid
    st.ssh_port = procs.read_pid(layout.ssh_port_file)
    st.services = {n: (p if procs.alive(p := procs.read_pid(layout.run_dir / f"{n}.pid")) else None)
                   for n in SERVICES}
    ver = subprocess.run([str(layout.binary("stad")), "--version"], capture_output=True,
                         text=True, env=layout.dut_env())
    st.running_version = ver.stdout.strip() or None
    with contextlib.suppress(rpc.RpcError):
        st.associated = rpc.count(layout.socket)
    sim = procs.read_pid(layout.stasim_pid)
    st.stasim_pid = sim if procs.alive(sim) else None
    st.state = tuning.read_state(layout)
    return st


def reboot(root: str | os.PathLike[str], timeout: float = 20) -> VlabStatus:
    layout = VlabLayout.at(root)
    pid = procs.read_pid(layout.dutd_pid)
    if not procs.alive(pid):
        raise VlabError(f"no vlab is up in {layout.root}", f"labwarden vlab up --dir {layout.root}")
    old = procs.read_pid(layout.run_dir / "stad.pid")
    subprocess.run(["sh", str(layout.rootfs / "sbin" / "reboot")], env=layout.dut_env(), check=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = procs.read_pid(layout.run_dir / "stad.pid")
        pids = _service_pids(layout)
        if new not in (None, old) and len(pids) == len(SERVICES) and _answers(layout) \
                and layout.ssh_port_file.exists():
            return status(root)
        time.sleep(0.05)
    raise VlabError("the DUT did not come back from reboot", f"see {layout.logs / 'dutd.log'}")


def _answers(layout: VlabLayout) -> bool:
    try:
        rpc.call(layout.socket, "version", timeout=1)
    except rpc.RpcError:
        return False
    return True


def load_generator(layout: VlabLayout) -> StasimLoad:
    return StasimLoad(binary=layout.loadgen / "stasim", socket=str(layout.socket),
                      pidfile=layout.stasim_pid, log=layout.logs / "stasim.log")


def associate(root: str | os.PathLike[str], stations: int, timeout: float = 15) -> dict[str, int]:
    """Hold `stations` clients through stasim (0 = disassociate all); returns the datamodel count."""
    if stations < 0:
        raise VlabError(f"stations must be >= 0, got {stations}", "e.g. `vlab associate 114`")
    layout = VlabLayout.at(root)
    if not _answers(layout):
        raise VlabError(f"stad is not answering in {layout.root}",
                        f"`labwarden vlab status --dir {layout.root}`; `vlab up` if it is down")
    try:
        load_generator(layout).hold(stations)
    except LoadError as exc:
        raise VlabError(exc.problem, exc.remedy) from exc
    deadline = time.monotonic() + timeout
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = rpc.count(layout.socket)
        if counts.get("total") == stations:
            return counts
        time.sleep(0.05)
    raise VlabError(f"datamodel holds {counts.get('total')} stations, expected {stations}",
                    f"see {layout.logs / 'stasim.log'} and {layout.logs / 'stad.log'}")


def restart_services(root: str | os.PathLike[str], timeout: float = 15) -> dict[str, int]:
    """Restart stad and stamon without a reboot (no drift): stop them and let the process
    manager respawn them, as `/etc/init.d/x restart` would. Held stations are lost with stad."""
    layout = VlabLayout.at(root)
    old = _service_pids(layout)
    for pid in old.values():
        procs.stop(pid, timeout=5)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = _service_pids(layout)
        if len(pids) == len(SERVICES) and not set(pids.values()) & set(old.values()) \
                and _answers(layout):
            return pids
        time.sleep(0.05)
    raise VlabError("services did not come back after restart (process manager disabled?)",
                    f"see {layout.logs / 'dutd.log'}; `labwarden vlab reboot --dir {layout.root}`")


def flash(root: str | os.PathLike[str], patches: list[str] | None = None,
          timeout: float = 30) -> firmware.BuildManifest:
    """Build (cached) and flash an image on a running vlab, and wait for the DUT to come back."""
    layout = VlabLayout.at(root)
    manifest, _ = firmware.build(layout, patches)
    old = procs.read_pid(layout.run_dir / "stad.pid")
    procs.stop(procs.read_pid(layout.stasim_pid), timeout=10)
    flash_local(layout, manifest)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = _service_pids(layout)
        if len(pids) == len(SERVICES) and pids.get("stad") != old and _answers(layout):
            return manifest
        time.sleep(0.05)
    raise VlabError("the DUT did not come back after flashing", f"see {layout.logs / 'dutd.log'}")
