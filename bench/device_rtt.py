"""Warm round trip of a trivial command on a fresh vlab: Device's persistent channel, a plain SSH
exec on the same connection, the channel through Debian's OpenSSH sshd and dropbear (stock
servers on 127.0.0.1, busybox ash; target p50 <= 2 ms), and labgrid's SSHDriver.run (one `ssh`
process per call, through its ControlMaster). p50/p95 over N calls after 10 warm-up calls each;
ratios are against the vlab's channel.

labgrid 26's SSHDriver starts its master with StrictHostKeyChecking=no and has no option to pass
ssh arguments, so here its `ssh` tool is a wrapper that puts a pinned UserKnownHostsFile first
(ssh keeps the first value of an option); the bench checks that an impostor key is refused.

    .venv/bin/python bench/device_rtt.py [-n 200] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import shlex
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path

import asyncssh
from rich.console import Console
from rich.table import Table

from labwarden.lab.dut.connection import CIPHERS
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.vlab import control, stockssh
from labwarden.vlab.layout import VlabLayout

COMMANDS = (["true"], ["cat", "/proc/loadavg"])
STOCK_NAMES = {"openssh": "Debian OpenSSH sshd", "dropbear": "dropbear"}
WARMUP = 10


def _quantiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 in ms."""
    cuts = statistics.quantiles(samples, n=20, method="inclusive")
    return statistics.median(samples) * 1e3, cuts[18] * 1e3


async def _time_async(call: Callable[[], Awaitable[object]], n: int) -> list[float]:
    for _ in range(WARMUP):
        await call()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - t0)
    return samples


class Labgrid:
    """labgrid's SSHDriver on the vlab, built from a generated env YAML (blocking: run in a thread)."""

    def __init__(self, layout: VlabLayout, port: int, work: Path, known_hosts: Path, timeout: float):
        from labgrid import Environment  # heavy import, and only this row needs it

        ssh = shutil.which("ssh")
        if ssh is None:
            raise RuntimeError("no `ssh` client on PATH (apt-get install openssh-client)")
        work.mkdir(parents=True, exist_ok=True)
        wrapper = work / "ssh-pinned"
        wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(ssh)} -o StrictHostKeyChecking=yes "
                           f"-o UserKnownHostsFile={shlex.quote(str(known_hosts))} \"$@\"\n")
        wrapper.chmod(0o755)
        env_yaml = work / "env.yaml"  # JSON is YAML
        env_yaml.write_text(json.dumps({
            "targets": {"main": {
                "resources": {"NetworkService": {"address": "127.0.0.1", "port": port,
                                                 "username": "root"}},
                "drivers": {"SSHDriver": {"keyfile": str(layout.client_key),
                                          "connection_timeout": timeout}}}},
            "tools": {"ssh": str(wrapper)}}))
        self.env = Environment(config_file=str(env_yaml))
        target = self.env.get_target("main")
        assert target is not None
        self.target = target
        self.driver = target.get_driver("SSHDriver")  # activates: starts the ControlMaster

    def time(self, argv: list[str], n: int) -> list[float]:
        cmd = " ".join(argv)  # SSHDriver.run splits on spaces; our commands have no quoting
        for _ in range(WARMUP):
            self._run(cmd)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            self._run(cmd)
            samples.append(time.perf_counter() - t0)
        return samples

    def _run(self, cmd: str) -> None:
        _out, err, rc = self.driver.run(cmd)
        if rc != 0:
            raise RuntimeError(f"labgrid `{cmd}` exited {rc}: {err}")

    def close(self) -> None:
        self.env.cleanup()


def _labgrid_pin_holds(layout: VlabLayout, port: int, work: Path) -> str | None:
    """None if labgrid (through the wrapper) refuses an impostor host key; else why not."""
    work.mkdir(parents=True, exist_ok=True)
    impostor = work / "impostor_known_hosts"
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    impostor.write_text(f"[127.0.0.1]:{port} {key}\n")
    logging.disable(logging.WARNING)  # labgrid logs ssh's (expected) refusal as warnings
    try:
        Labgrid(layout, port, work / "impostor", impostor, timeout=2.0).close()
    except Exception:  # labgrid raises a bare Exception on a failed master
        return None
    finally:
        logging.disable(logging.NOTSET)
    return "labgrid connected although the pinned host key was an impostor's"


async def _measure(root: Path, n: int, console: Console) -> None:
    layout = VlabLayout.at(root)
    port = int(layout.ssh_port_file.read_text())
    endpoint = SshEndpoint(host="127.0.0.1", port=port, key=str(layout.client_key),
                           host_key=control.host_key_line(layout))
    rows: dict[str, dict[str, tuple[float, float]]] = {}
    labgrid_note = ""
    notes: list[str] = []
    load_before = os.getloadavg()
    async with Device(endpoint) as dev:
        for argv in COMMANDS:
            name = " ".join(argv)
            rows.setdefault("Device.run (persistent channel)", {})[name] = _quantiles(
                await _time_async(lambda argv=argv: dev.run(argv, check=True), n))
            rows.setdefault("Device.exec (SSH exec, same connection)", {})[name] = _quantiles(
                await _time_async(lambda argv=argv: dev.exec(argv), n))
    for kind in stockssh.SERVERS:  # the same channel through Debian's own servers
        path = f"Device.run via {STOCK_NAMES[kind]} (persistent channel)"
        why = stockssh.unavailable(kind)
        if why:
            notes.append(f"{kind} row missing: {why}")
            continue
        server = await asyncio.to_thread(stockssh.start, kind, root / f"stock-{kind}")
        try:
            async with Device(server.endpoint(), env={"PATH": "/usr/bin:/bin"}) as dev:
                for argv in COMMANDS:
                    rows.setdefault(path, {})[" ".join(argv)] = _quantiles(
                        await _time_async(lambda argv=argv: dev.run(argv, check=True), n))
                stray = dev.stray_output
            if stray:
                notes.append(f"{kind}: stray output on the channel: {stray[:2]}")
        finally:
            await asyncio.to_thread(server.stop)
    work = root / "labgrid-bench"
    try:
        problem = await asyncio.to_thread(_labgrid_pin_holds, layout, port, work)
        if problem:
            raise RuntimeError(problem)
        lg = await asyncio.to_thread(Labgrid, layout, port, work / "pinned", layout.known_hosts, 10.0)
        try:
            for argv in COMMANDS:
                samples = await asyncio.to_thread(lg.time, list(argv), n)
                rows.setdefault("labgrid SSHDriver.run (ssh + ControlMaster)", {})[" ".join(argv)] = \
                    _quantiles(samples)
        finally:
            await asyncio.to_thread(lg.close)
        labgrid_note = "labgrid host key pinned via an ssh wrapper (impostor key refused)"
    except Exception as exc:  # report why labgrid could not run instead of faking its row
        labgrid_note = f"labgrid row missing: {type(exc).__name__}: {exc}"
    _render(console, rows, n, "; ".join([labgrid_note, *notes]), CIPHERS[0], load_before)


def _render(console: Console, rows: dict[str, dict[str, tuple[float, float]]], n: int, note: str,
            cipher: object, load_before: tuple[float, float, float]) -> None:
    table = Table(title=f"Warm round trip on the vlab ({n} calls after {WARMUP} warm-up)")
    for col in ("command", "path", "p50 ms", "p95 ms", "p50 / channel"):
        table.add_column(col, justify="left" if col in ("command", "path") else "right")
    base = rows["Device.run (persistent channel)"]
    for argv in COMMANDS:
        name = " ".join(argv)
        for path, by_cmd in rows.items():
            p50, p95 = by_cmd[name]
            table.add_row(name, path, f"{p50:.2f}", f"{p95:.2f}", f"{p50 / base[name][0]:.1f}x")
        table.add_section()
    console.print(table)
    console.print(note)
    console.print(f"conditions: host {platform.node()}, {os.cpu_count()} cpus, loadavg before "
                  f"{load_before[0]:.2f} after {os.getloadavg()[0]:.2f}; python "
                  f"{platform.python_version()}, asyncssh {version('asyncssh')}, labgrid "
                  f"{version('labgrid')}, cipher {cipher} (Device's first choice); "
                  "DUT = vlab sshd (asyncssh) on 127.0.0.1; OpenSSH/dropbear rows: Debian's "
                  "servers on 127.0.0.1 with busybox ash (labwarden.vlab.stockssh)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200, help="timed calls per path and command")
    ap.add_argument("--dir", default=None, help="vlab state dir (default: a new temp dir)")
    args = ap.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="vlab-rtt-"))
    console = Console()
    try:
        console.print(f"bringing up a vlab in {root}")
        control.up(root)
        asyncio.run(_measure(root, args.n, console))
    finally:
        control.down(root)


if __name__ == "__main__":
    main()
