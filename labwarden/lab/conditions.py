"""Snapshot a window's measurement conditions on the DUT (core/conditions.WindowConditions)."""

from __future__ import annotations

import platform
import struct

from labwarden.core.conditions import WindowConditions
from labwarden.core.provenance import labwarden_version
from labwarden.lab import knobs
from labwarden.lab.boardstate import BoardState
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError

AT_NULL, AT_PAGESZ, AT_CLKTCK = 0, 6, 17


def clk_tck_from_auxv(data: bytes) -> int | None:
    """AT_CLKTCK from an ELF auxiliary vector (/proc/PID/auxv) of unknown word size and byte
    order (an ARM or MIPS DUT): the layout that parses as a well-formed vector wins -- pairs of
    words ending with AT_NULL, a power-of-two AT_PAGESZ, and an AT_CLKTCK."""
    for fmt, size in (("<Q", 8), (">Q", 8), ("<I", 4), (">I", 4)):
        if not data or len(data) % (2 * size):
            continue
        words = [struct.unpack_from(fmt, data, i)[0] for i in range(0, len(data), size)]
        pairs = dict(zip(words[::2], words[1::2], strict=True))
        if words[-2:] != [AT_NULL, 0] or any(k > 64 for k in words[::2]):
            continue
        page = pairs.get(AT_PAGESZ, 0)
        if page >= 1024 and page & (page - 1) == 0 and 0 < pairs.get(AT_CLKTCK, 0) < 100_000:
            return int(pairs[AT_CLKTCK])
    return None


_UPTIME_RATIO = 'read -r up _ < /proc/uptime; read -r st < /proc/$$/stat; echo "$up ${st##*)}"'
"""Constant script: uptime (s) and this shell's stat fields after the comm (starttime in ticks)."""


async def clk_tck(dev: Device) -> int:
    """The DUT's CLK_TCK (ticks per second of /proc times), without `getconf` (busybox has none):
    AT_CLKTCK from /proc/self/auxv; else a fresh shell's start time in ticks over the uptime,
    rounded to a known rate. 0 when neither answers (gate 4 then fails; 100 is never guessed)."""
    try:
        found = clk_tck_from_auxv(await dev.read_file("/proc/self/auxv", max_bytes=4096))
    except DeviceError:
        found = None
    return found or await clk_tck_from_uptime(dev)


async def clk_tck_from_uptime(dev: Device) -> int:
    """CLK_TCK as a fresh shell's start time (ticks since boot) over the uptime (s), rounded to
    the nearest known rate; 0 when the DUT's /proc does not answer."""
    res = await dev.run(["sh", "-c", _UPTIME_RATIO], timeout=10)
    try:
        up, rest = res.stdout.split(" ", 1)
        start = int(rest.split()[19])  # stat field 22; the text after ')' starts at field 3
        rate = start / float(up)
    except (ValueError, IndexError, ZeroDivisionError):
        return 0
    return min((100, 250, 300, 1000, 1024, 1200, 64, 128, 256, 512, 32),
               key=lambda hz: abs(hz - rate) / hz)


async def snapshot(dev: Device, profile: LabProfile, state: BoardState, stations: int,
                   perf: str | None = None) -> WindowConditions:
    radio, boost, gov = (knobs.RadioTopology(dev, profile), knobs.Boost(dev, profile),
                         knobs.Governor(dev, profile))
    topo = await radio.topology() if await radio.available() is None else None
    boost_state = await boost.state()
    gov_missing = await gov.available()
    governors = await gov.governors() if gov_missing is None else []
    na = {k.name: why for k, why in ((gov, gov_missing),
                                     (boost, None if boost_state.applicable else
                                      boost_state.value.removeprefix("n/a: "))) if why}
    host = (await dev.run(["uname", "-n"])).stdout.strip() or platform.node()
    return WindowConditions(not_applicable=na,
        build_id=state.verified_build if state.fingerprint_ok() else None,
        fingerprint_verified=state.fingerprint_ok(), governors=governors,
        boost=boost_state.value, clk_tck=await clk_tck(dev),
        vaps_enabled=topo.vaps_enabled if topo else [], channels=topo.channels if topo else {},
        stations=stations, host=host, target=profile.target.process,
        perf=perf, labwarden=labwarden_version())
