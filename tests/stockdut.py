"""Stock SSH servers for tests: Debian's OpenSSH sshd and dropbear (labwarden.vlab.stockssh) in
front of a vlab, so every tool runs against a server labwarden did not write."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwarden.lab.config import LabProfile
from labwarden.vlab import stockssh
from labwarden.vlab.layout import VlabLayout

KINDS = pytest.mark.parametrize("kind", stockssh.SERVERS)


def serve(kind: stockssh.ServerKind, root: Path) -> Iterator[stockssh.StockSsh]:
    """A running `kind` server (skips with the reason when this host cannot run it)."""
    why = stockssh.unavailable(kind)
    if why:
        pytest.skip(f"{kind}: {why}")
    server = stockssh.start(kind, root)
    try:
        yield server
    finally:
        server.stop()


def behind(layout: VlabLayout, server: stockssh.StockSsh) -> LabProfile:
    """The vlab's own profile, with the DUT reached through `server` instead of the vlab's sshd."""
    data = tomllib.loads(layout.lab_toml.read_text())
    ep = server.endpoint()
    data["dut"]["ssh"] = {"host": ep.host, "port": ep.port, "user": ep.user, "key": ep.key,
                          "host_key": ep.host_key}
    return LabProfile.from_dict(data, layout.lab_toml)


LOGFILT = Path(__file__).resolve().parent / "data" / "logfilt"
"""The second firmware's sources (a rule-based log filter) and its DUT side (dut/)."""


def logfilt_profile(root: Path, server: stockssh.StockSsh, src: Path) -> str:
    """The logfilt DUT's lab profile, as its owner would write it: no wireless, no cpufreq, no
    RPC client, no load; a sysupgrade image; the hotspot probed by a static function's name."""
    q = json.dumps
    ep = server.endpoint()
    return f"""[lab]
name = "logfilt"

[dut]
backend = "ssh"
env = {{ PATH = {q(f"{root}/rootfs/usr/sbin:{root}/rootfs/sbin:{root}/bb")} }}

[dut.ssh]
host = "127.0.0.1"
port = {ep.port}
user = "root"
key = {q(ep.key)}
host_key = {q(ep.host_key)}

[dut.paths]
rootfs = {q(f"{root}/rootfs")}
overlay = {q(f"{root}/overlay")}
tmp = {q(f"{root}/tmp")}
run = {q(f"{root}/run")}

[build]
repo = {q(str(src))}
builds = {q(f"{root}/builds")}
command = ["make", "O={{out}}", "GIT_HASH={{git_hash}}"]
artifacts = {{ logfilt = "usr/sbin/logfilt", logspam = "usr/sbin/logspam" }}

[flash]
kind = "sysupgrade"

[load]
kind = "none"

[target]
process = "logfilt"
suspects = ["logspam"]
uprobes = {{ lines = "filter_line" }}
pidfiles = {{ logfilt = {q(f"{root}/run/logfilt.pid")}, logspam = {q(f"{root}/run/logspam.pid")} }}
"""


def logfilt_dut(root: Path) -> Iterator[tuple[stockssh.StockSsh, Path]]:
    """A DUT of its own behind dropbear, busybox ash as root's shell and as every DUT command's
    userland (PATH: its rootfs and busybox's applets; perf is the one extra). Its rootfs starts
    empty: the test flashes the first image. Yields the server and the lab profile's path."""
    why = stockssh.unavailable("dropbear")
    if why:
        pytest.skip(f"dropbear: {why}")
    src = root / "src"
    shutil.copytree(LOGFILT, src, ignore=shutil.ignore_patterns("dut"))
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "logfilt 1.0"]):
        subprocess.run(["git", "-C", str(src), "-c", "user.name=fw", "-c", "user.email=fw@x.invalid",
                        *args], check=True, capture_output=True)
    dut = root / "dut"
    sbin = dut / "rootfs" / "sbin"
    sbin.mkdir(parents=True)
    for name in ("init", "sysupgrade", "reboot"):
        shutil.copy2(LOGFILT / "dut" / name, sbin / name)
    bb = dut / "bb"
    bb.mkdir()
    for applet in subprocess.run([stockssh.BUSYBOX, "--list"], capture_output=True, text=True,
                                 check=True).stdout.split():
        (bb / applet).symlink_to(stockssh.BUSYBOX)
    perf = shutil.which("perf")
    if perf:
        (bb / "perf").symlink_to(perf)
    server = stockssh.start("dropbear", dut, init=str(sbin / "init"))
    try:
        lab = dut / "lab.toml"
        lab.write_text(logfilt_profile(dut, server, src))
        yield server, lab
    finally:
        server.stop()
