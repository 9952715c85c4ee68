"""Stock SSH servers for tests: Debian's OpenSSH sshd and dropbear (labwarden.vlab.stockssh) in
front of a vlab, so every tool runs against a server labwarden did not write."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from labwarden.lab.config import LabProfile
from labwarden.vlab import stockssh
from labwarden.vlab.layout import VlabLayout

KINDS = pytest.mark.parametrize("kind", stockssh.SERVERS)


def cannot_run(why: str) -> NoReturn:
    """Skip with the reason -- but fail under CI (CI=true, as root): there scripts/setup-system.sh
    installs every package these tests need, and a skip would hide a broken set-up. (Root is
    not something the set-up provides: without it they skip, CI or not.)"""
    if os.environ.get("CI", "").lower() in ("true", "1") and os.geteuid() == 0:
        pytest.fail(f"{why} -- CI=true: the project's set-up must provide it")
    pytest.skip(why)


def serve(kind: stockssh.ServerKind, root: Path) -> Iterator[stockssh.StockSsh]:
    """A running `kind` server (skips with the reason when this host cannot run it)."""
    why = stockssh.unavailable(kind)
    if why:
        cannot_run(f"{kind}: {why}")
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


def history(src: Path) -> None:
    """The firmware repo: the packaged tree as `logfilt 1.0` (HEAD, tagged v1.0), and a branch
    `next` of three commits on it, one of which makes logfilt slower (bisect's quarry)."""
    from tests.logfilt_patches import HISTORY, apply

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(src), "-c", "user.name=fw", "-c",
                               "user.email=fw@x.invalid", *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "logfilt 1.0"], ["tag", "v1.0"]):
        git(*args)
    first = git("symbolic-ref", "--short", "HEAD")
    git("checkout", "-qb", "next")
    for path, subject, edits in HISTORY:
        (src / path).write_text(apply((src / path).read_text(), edits))
        git("commit", "-qam", subject)
    git("checkout", "-q", first)


def logfilt_dut(root: Path) -> Iterator[tuple[stockssh.StockSsh, Path]]:
    """A DUT of its own behind dropbear, busybox ash as root's shell and as every DUT command's
    userland (PATH: its rootfs and busybox's applets; perf is the one extra). Its rootfs starts
    empty: the test flashes the first image. Yields the server and the lab profile's path."""
    why = stockssh.unavailable("dropbear")
    if why:
        cannot_run(f"dropbear: {why}")
    src = root / "src"
    shutil.copytree(LOGFILT, src, ignore=shutil.ignore_patterns("dut"))
    history(src)
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
