"""Measurement records: a window (one rep), a measurement (reps of windows at one density) and
a sweep (one measurement per density).

Stored by core/records.py under kinds "prof" and "swp"; raw data (perf.data, kallsyms) are
artifacts in `artifacts/<measurement id>/`. The kind "prof" and the `profile_id` keys keep the
name the `measure` tool had when they were first stored: records and transcripts hold them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from labwarden.core.conditions import WindowConditions
from labwarden.core.kernelsplit import KernelSplit

CpuClock = Literal["schedstat_ns", "ticks"]
"""Which clock a window's CPU figure was computed from (lab/dut/sampler.py reads both)."""

MAX_REPS = 10
"""Windows one measure call takes at most (its input's bound; an A/B's longer segment is
several calls)."""


class Window(BaseModel):
    rep: int
    started_at: datetime
    duration_s: float
    cpu_pct: float = Field(description="target CPU, % of one core, over the window")
    cpu_series: list[float] = Field(description="1 Hz CPU% samples")
    cpu_clock: CpuClock = Field(
        "ticks", description="what cpu_pct and cpu_series were computed from: schedstat_ns, the "
        "target's threads' run time in ns (/proc/PID/task/*/schedstat); ticks, utime+stime in "
        "CLK_TCK ticks (the only clock of records older than the field; the record's notes say "
        "why where the DUT's ns could not be used)")
    resolution_pct: float | None = Field(None, description="the smallest step of cpu_pct, % of "
                                         "one core: one tick over the sampled span (ticks), or "
                                         "what the span's 10 ms timestamps move the figure by "
                                         "(schedstat_ns); None: a record older than the field")
    wait_pct: float | None = Field(None, description="the target's threads waited this long on a "
                                   "run queue for a CPU over the window, % of one core "
                                   "(schedstat run_delay): a starved target; None: not read")
    rss_kb: int
    io_read_bytes: int = 0
    io_write_bytes: int = 0
    counters: dict[str, float] = Field(default_factory=dict, description="uprobe hits per second")
    datamodel_start: int | None = Field(description="clients in the datamodel when the window "
                                        "started (None: the DUT has no clients reader)")
    datamodel_end: int | None = Field(description="... and when it ended (clients held?)")
    restarted: bool = Field(False, description="the target restarted during the window")
    perf_data: str | None = Field(None, description="artifact path of perf.data (if recorded)")
    perf_bytes: int | None = None
    kernel: KernelSplit | None = Field(None, description="the DUT's CPU split per core and "
                                       "softirq counts over the window (/proc/stat and "
                                       "/proc/softirqs at its start and end); None: not measured "
                                       "(records before [2/6], or the DUT did not answer)")
    conditions: WindowConditions


class MeasurementRecord(BaseModel):
    id: str
    stations: int
    window_s: float
    kind: str = Field("loaded", description="loaded | idle")
    build_id: str | None = Field(description="verified build running (symfs source)")
    target_pid: int
    system_wide: bool = Field(False, description="perf recorded every CPU (`-a -g`, kernel "
                              "stacks), not only the target")
    windows: list[Window]
    kallsyms: str | None = Field(None, description="artifact path of the DUT's /proc/kallsyms")
    uprobes: dict[str, str] = Field(default_factory=dict, description="counter -> function")
    notes: list[str] = Field(default_factory=list, description="what was not measured, and why")

    def cpu_values(self) -> list[float]:
        return [w.cpu_pct for w in self.windows]


class SweepPoint(BaseModel):
    stations: int
    profile_id: str
    cpu_mean: float
    cpu_stdev: float
    cpu_per_rep: list[float]
    idle_cpu_mean: float | None = Field(description="no-traffic CPU at the same client count")
    counters: dict[str, float]
    rss_kb: int
    per_radio: list[int]
    clients_held: bool = Field(description="datamodel count equal to the clients in every window")


class SweepRecord(BaseModel):
    id: str
    label: str | None = None
    started_at: datetime
    window_s: float
    reps: int
    build_id: str | None
    points: list[SweepPoint]
    cleanup_count: int | None = Field(description="datamodel count after disassociating everyone "
                                      "(None: the DUT has no clients reader)")
    idle_note: str | None = None
    axis: str | None = Field("clients", description="what the points count (the load's axis: "
                             "clients, streams); None: a load without one (a DUT busy with its "
                             "own input, one point 0). Records older than the field: clients")
    parity: str | None = Field(None, description="output of the profile's parity check at the "
                               "densest point (None: none declared)")
    place: str | None = Field(None, description="the fleet place it ran on (None: a lab of one "
                              "DUT, or a record older than the field)")
    settle_s: float | None = Field(None, description="as asked (None: the load's own, or a "
                                   "record older than the field)")
    perf: bool | None = Field(None, description="perf recorded at the densest point (None: a "
                              "record older than the field)")
    idle_baseline: bool | None = Field(None, description="as asked (None: a record older than "
                                       "the field)")
