"""A saturation run's models, as data: its question (the saturate tool's input), each window's
step, its answer and the stored record (`sat-` records). The saturate tool writes them;
gate_check and the saturation gates read them without importing the tool."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from labwarden.core.spec import ToolInput
from labwarden.lab import trafficwin

Limit = Literal["cpu", "queue", "ingress", "load_host", "beyond_dut", "not_reached", "unknown"]


class SaturateInput(ToolInput):
    proto: Literal["udp"] = Field("udp", description="udp: a packet rate with loss needs datagrams "
                                  "(TCP backs off instead of losing: use traffic_sweep)")
    length: int = Field(ge=16, le=65507, description="UDP payload bytes per datagram (-l)",
                        examples=[100, 1500])
    direction: Literal["up", "down"] = Field("up", description="up: lan -> wan; down: wan -> lan")
    loss_max_pct: float = Field(1.0, ge=0, le=50, description="stable = at most this share of the "
                                "offered datagrams missing at the receiver (lost in transit, or "
                                "never sent: 002's send errors count too)")
    start_pps: int = Field(2000, ge=100, le=10_000_000, description="first rate tried")
    max_pps: int = Field(400_000, ge=100, le=10_000_000, description="never offer more")
    precision_pct: float = Field(10, ge=1, le=50, description="bisect until the stable and the "
                                 "unstable rate are this close")
    window_s: float = Field(4, ge=3, le=60, description="seconds per window")
    max_windows: int = Field(12, ge=2, le=30, description="bracket + bisect windows at most")
    verify: bool = Field(True, description="check the answer at 1.2x and 0.8x")
    rechecks: int = Field(1, ge=0, le=3, description="when the check disagrees with the search (a "
                          "noisy window), move the answer to what the check found and check again, "
                          "this many times")
    cpu_ceiling_pct: float = Field(90, ge=50, le=100, description="a core's softirq + system share "
                                   "at or above this is the CPU limit")
    baseline: str | None = Field(None, pattern=r"^sat-[0-9a-f]{12}$", description="an earlier "
                                 "saturate_id to compare with (same length and direction)",
                                 examples=["sat-0123456789ab"])

    @model_validator(mode="after")
    def _range(self) -> SaturateInput:
        if self.start_pps > self.max_pps:
            raise ValueError("start_pps must be <= max_pps")
        return self


class SatStep(BaseModel):
    offered_pps: int
    offered_mbps: float
    received_pps: float | None
    loss_pct: float | None = Field(description="iperf3's loss: lost / sent datagrams, %")
    shortfall_pct: float = Field(description="offered datagrams that did not arrive, % (loss, or "
                                 "not sent)")
    stable: bool
    on_target: bool = Field(description="the sender reached the offered rate")
    cpu_busy_pct: float = Field(description="DUT, all cores")
    busiest_cpu: str | None
    busiest_softirq_system_pct: float
    ksoftirqd_pct: float = Field(description="ksoftirqd threads together, % of one core")
    softnet_squeezed: int
    queue_drops: int = Field(description="DUT qdisc drops + tx drops + tx errors")
    dut_forwarded_pct: float | None = Field(description="packets out of the egress NIC / into the "
                                            "ingress NIC, % (None: no packets came in)")
    dut_rx_pps: float | None = Field(description="packets/s into the DUT's ingress NIC")


class VsBaseline(BaseModel):
    baseline_id: str
    baseline_pps: int | None
    change_pct: float | None = Field(description="stable_pps vs the baseline's, %")
    improved: bool = Field(description="stable now at or above the rate the baseline's own 1.2x "
                           "check lost at: beyond the baseline's bracket, not within its noise")
    rule: str


class SaturateOutput(BaseModel):
    saturate_id: str
    length: int
    direction: str
    loss_max_pct: float
    stable_pps: int | None = Field(description="the highest offered rate delivered within the "
                                   "threshold (None: even the lowest rate tried was not)")
    stable_mbps: float | None
    limit: Limit
    evidence: str = Field(description="the DUT's counters behind the named limit")
    steps: list[SatStep] = Field(description="bracket and bisect windows, in order")
    verify_above: SatStep | None = Field(None, description="the window at 1.2x the answer")
    verify_below: SatStep | None = Field(None, description="the window at 0.8x the answer")
    confirmed: bool | None = Field(None, description="at 1.2x more than the threshold did not "
                                   "arrive, at 0.8x it did (None: not verified)")
    vs_baseline: VsBaseline | None = None


class SaturateRecord(BaseModel):
    id: str
    started_at: datetime
    input: SaturateInput
    windows: list[trafficwin.TrafficStep]
    result: SaturateOutput
