"""traffic_sweep: a ladder of offered traffic loads through the DUT (UDP or TCP bitrates, or
parallel streams) -- at each step a measured iperf3 window with the DUT's CPU split per core
(softirq, system, user) and its conditions; throughput, loss and CPU per step, plus an idle
window with the load stopped as the CPU baseline.

Needs a lab whose [load] kind is "iperf3". Sends traffic through the DUT; leaves no load running.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field, model_validator

from labwarden.core.kernelsplit import KernelSplit
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab import trafficwin
from labwarden.lab.drivers.load.iperf3 import TrafficSpec
from labwarden.lab.dut import kstat
from labwarden.results.traffic_sweep import IdleCpu, TrafficPoint, TrafficSweepOutput, TrafficSweepRecord
from labwarden.tools.context import LabContext


class TrafficSweepInput(ToolInput):
    proto: Literal["udp", "tcp"] = Field("udp", description="udp or tcp")
    direction: Literal["up", "down"] = Field("up", description="up: lan -> wan; down: wan -> lan (-R)")
    length: int | None = Field(1200, ge=16, le=65507, description="bytes per write (-l); UDP: the "
                               "datagram payload", examples=[1200])
    bitrates_mbps: list[Annotated[float, Field(gt=0, le=100000)]] | None = Field(
        None, min_length=1, max_length=12, description="offered rates, ascending (a UDP ladder)",
        examples=[[25, 50, 100, 200]])
    streams: list[Annotated[int, Field(ge=1, le=32)]] | None = Field(
        None, min_length=1, max_length=8, description="parallel streams per step, ascending (a TCP "
        "ladder; with bitrates_mbps too, every step uses the first stream count)", examples=[[1, 2, 4]])
    window_s: float = Field(5, ge=3, le=120, description="seconds per step")
    idle_baseline: bool = Field(True, description="first, a window with the load stopped: the "
                                "DUT's CPU without traffic")
    label: str | None = Field(None, max_length=64, examples=["chain-200"])

    @model_validator(mode="after")
    def _ladder(self) -> TrafficSweepInput:
        if not self.bitrates_mbps and not self.streams:
            raise ValueError("give bitrates_mbps (e.g. [25, 50, 100]) or streams (e.g. [1, 2, 4])")
        for name in ("bitrates_mbps", "streams"):
            v = getattr(self, name)
            if v and v != sorted(set(v)):
                raise ValueError(f"{name} must be distinct and ascending")
        if self.proto == "udp" and not self.bitrates_mbps:
            raise ValueError("a UDP ladder needs bitrates_mbps")
        return self

    def specs(self) -> list[TrafficSpec]:
        if self.bitrates_mbps:
            streams = self.streams[0] if self.streams else 1
            return [TrafficSpec(proto=self.proto, direction=self.direction, length=self.length,
                                streams=streams, bitrate_mbps=b, omit_s=1) for b in self.bitrates_mbps]
        return [TrafficSpec(proto=self.proto, direction=self.direction, length=self.length,
                            streams=n, omit_s=1) for n in self.streams or []]


def point(step: trafficwin.TrafficStep) -> TrafficPoint:
    t, k = step.traffic, step.kernel
    return TrafficPoint(offered_mbps=t.offered_mbps, streams=t.spec.streams,
                        achieved_mbps=t.achieved_mbps, loss_pct=t.loss_pct,
                        received_pps=t.received_pps, retransmits=t.retransmits,
                        cpu_busy_pct=k.total.busy_pct, softirq_pct=k.total.softirq_pct,
                        busiest_cpu=k.busiest_cpu,
                        busiest_softirq_system_pct=k.busiest_softirq_system_pct,
                        ksoftirqd_pct=round(sum(step.queues.ksoftirqd_pct.values()), 1),
                        queue_drops=step.queues.queue_drops(), on_target=t.on_target, check=t.check)


async def idle_split(ctx: LabContext, seconds: float) -> KernelSplit:
    """The DUT's CPU split over `seconds` with the load stopped."""
    await trafficwin.driver(ctx.profile).hold(0)
    before = await kstat.snapshot(ctx.device)
    await asyncio.sleep(seconds)
    return kstat.delta(before, await kstat.snapshot(ctx.device))


async def run(ctx: LabContext, inp: TrafficSweepInput) -> TrafficSweepOutput:
    load = trafficwin.driver(ctx.profile)
    store = RecordStore(ctx.data_dir)
    sid = store.new_id("tsw")
    specs = inp.specs()
    started = datetime.now(UTC)
    idle = None
    if inp.idle_baseline:
        await ctx.report(0, len(specs) + 1, "idle window (load stopped)")
        idle = await idle_split(ctx, inp.window_s)
    steps = []
    for i, spec in enumerate(specs):
        what = f"{spec.bitrate_mbps:g} Mbit/s" if spec.bitrate_mbps else f"{spec.streams} streams"
        await ctx.report(i + 1, len(specs) + 1, f"{spec.proto} {spec.direction} {what}")
        steps.append(await trafficwin.measure(ctx.device, ctx.profile, ctx.state, load, spec,
                                              inp.window_s))
    store.save("tsw", sid, TrafficSweepRecord(id=sid, label=inp.label, started_at=started,
                                              idle=idle, steps=steps))
    await ctx.report(len(specs) + 1, len(specs) + 1, f"traffic sweep {sid} stored")
    return TrafficSweepOutput(
        sweep_id=sid, label=inp.label, proto=inp.proto, direction=inp.direction, length=inp.length,
        idle=IdleCpu(busy_pct=idle.total.busy_pct, softirq_pct=idle.total.softirq_pct,
                     busiest_softirq_system_pct=idle.busiest_softirq_system_pct,
                     summary=idle.summary()) if idle else None,
        points=[point(s) for s in steps])


SPEC = ToolSpec(name="traffic_sweep", description=describe(__doc__), input=TrafficSweepInput,
                output=TrafficSweepOutput, run=run, effect="mutates_dut",
                requires=frozenset({"lease", "board_healthy", "fingerprint_verified"}),
                budget_class="measure", measures=True,
                needs=frozenset({"traffic"}))
