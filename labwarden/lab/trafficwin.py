"""One measured traffic window: iperf3's view of the traffic (the load driver), and the DUT's view
of its own CPU (the kernel split per core, lab/dut/kstat.py) and queues (lab/dut/netq.py) over
the middle of the same window, with the window's conditions. `traffic_sweep` and `saturate` are
ladders of these.

The DUT snapshots skip the window's first second (iperf3's connect, the one-off server) and the
seconds iperf3 omits (`omit_s`), and its last half second, so the CPU split covers steady traffic
only, as iperf3's own totals do.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from labwarden.core.conditions import WindowConditions
from labwarden.core.errors import ToolError
from labwarden.core.kernelsplit import KernelSplit
from labwarden.lab.boardstate import BoardState
from labwarden.lab.conditions import snapshot
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.drivers.load import LoadError
from labwarden.lab.drivers.load.iperf3 import Iperf3, TrafficSpec, TrafficWindow
from labwarden.lab.dut import kstat, netq
from labwarden.lab.dut.device import Device

LEAD_S = 1.0
TAIL_S = 0.6


class TrafficStep(BaseModel):
    """A traffic window with the DUT's CPU split and queue counters over its steady part."""

    traffic: TrafficWindow
    kernel: KernelSplit = Field(description="the DUT's CPU split per core over the window")
    queues: netq.NetqDelta = Field(description="the DUT's NIC, qdisc and softnet counters")
    conditions: WindowConditions


def driver(profile: LabProfile) -> Iperf3:
    """The profile's traffic driver; a clear refusal for a lab whose load is not traffic."""
    load = load_drivers.for_profile(profile)
    if not isinstance(load, Iperf3):
        raise ToolError("invalid_input", f"this lab's [load] kind is {profile.load.kind!r}: it holds "
                        "clients, it does not send traffic", "use a lab profile with [load] kind = "
                        "\"iperf3\" (`labwarden qlab up --traffic` writes one)")
    return load


async def measure(dev: Device, profile: LabProfile, state: BoardState, load: Iperf3,
                  spec: TrafficSpec, seconds: float) -> TrafficStep:
    secs = max(3, round(seconds))
    cond = await snapshot(dev, profile, state, 0, perf=None)
    window = asyncio.ensure_future(load.window(spec, secs))
    try:
        await asyncio.sleep(LEAD_S + spec.omit_s)
        k0, q0 = await kstat.snapshot(dev), await netq.snapshot(dev)
        await asyncio.sleep(max(0.5, secs - LEAD_S - TAIL_S))
        k1, q1 = await kstat.snapshot(dev), await netq.snapshot(dev)
        traffic = await window
    except LoadError as exc:
        raise ToolError("device", exc.problem, exc.remedy) from exc
    finally:
        if not window.done():
            window.cancel()
            await asyncio.gather(window, return_exceptions=True)
    return TrafficStep(traffic=traffic, kernel=kstat.delta(k0, k1),
                       queues=netq.delta(q0, q1, cond.clk_tck), conditions=cond)
