"""What `traffic_sweep` returns (its spec's `output`), and its stored `tsw-` record."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from labwarden.core.kernelsplit import KernelSplit
from labwarden.lab import trafficwin


class IdleCpu(BaseModel):
    busy_pct: float = Field(description="all cores, % of their time")
    softirq_pct: float = Field(description="all cores: softirq share (near zero with no traffic)")
    busiest_softirq_system_pct: float
    summary: str


class TrafficPoint(BaseModel):
    offered_mbps: float | None
    streams: int
    achieved_mbps: float
    loss_pct: float | None
    received_pps: float | None
    retransmits: int | None
    cpu_busy_pct: float = Field(description="DUT, all cores, % of their time")
    softirq_pct: float = Field(description="DUT, all cores: softirq share")
    busiest_cpu: str | None
    busiest_softirq_system_pct: float = Field(description="the busiest core's softirq + system")
    ksoftirqd_pct: float = Field(description="ksoftirqd threads together, % of one core")
    queue_drops: int = Field(description="DUT qdisc drops + tx drops + tx errors in the window")
    on_target: bool
    check: str | None


class TrafficSweepRecord(BaseModel):
    id: str
    label: str | None
    started_at: datetime
    idle: KernelSplit | None
    steps: list[trafficwin.TrafficStep]


class TrafficSweepOutput(BaseModel):
    sweep_id: str
    label: str | None
    proto: str
    direction: str
    length: int | None
    idle: IdleCpu | None
    points: list[TrafficPoint]
