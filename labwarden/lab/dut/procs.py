"""Identify a DUT process instance (pid + start time), so a restart or a reused pid is seen."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError
from labwarden.lab.procfs import parse_stat


class ProcInstance(BaseModel):
    name: str
    pid: int
    starttime: int


async def find_pid(dev: Device, name: str, pidfile: str | None = None) -> int | None:
    """The pid of `name`: from its pid file when the profile names one (a host running several
    vlabs has several processes of that name), else by /proc comm. A pid file whose process is
    gone or is not `name` counts as not running."""
    if pidfile is None:
        pids = await dev.pidof(name)
        return pids[0] if pids else None
    try:
        pid = int((await dev.read_file(pidfile)).split()[0])
        comm = (await dev.read_file(f"/proc/{pid}/comm")).decode().strip()
    except (DeviceError, OSError, ValueError, IndexError):
        return None
    return pid if comm == name[:15] else None


async def instance(dev: Device, name: str, pidfile: str | None = None) -> ProcInstance | None:
    pid = await find_pid(dev, name, pidfile)
    if pid is None:
        return None
    try:
        text = (await dev.read_file(f"/proc/{pid}/stat")).decode()
    except (DeviceError, OSError):
        return None  # exited between the two reads
    return ProcInstance(name=name, pid=pid, starttime=parse_stat(text).starttime)


async def wait_new_instance(dev: Device, name: str, old: ProcInstance | None,
                            timeout: float, pidfile: str | None = None) -> ProcInstance:
    """Wait until `name` runs as an instance other than `old` (after a reboot or flash)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            await dev.wait_reachable(max(0.5, deadline - time.monotonic()))
            now = await instance(dev, name, pidfile)
            if now is not None and (old is None or (now.pid, now.starttime) != (old.pid, old.starttime)):
                return now
        except (DeviceError, OSError) as exc:
            last = exc
        await asyncio.sleep(0.2)
    raise DeviceError(f"{name} did not restart within {timeout:g} s" + (f" ({last})" if last else ""),
                      "is the DUT still booting? check its console and the process manager",
                      kind="timeout")
