"""sweep: the workload ladder -- at each point (clients, streams: the load's axis; topology
constant, even split over the radios; 0 on a DUT without a load) measure `reps` windows, and
return the curve with counters and RSS per point.

Each point's association and windows are nested `associate` and `measure` calls (guarded,
logged under the sweep). Mutates DUT state (its load), and leaves the DUT with no load when it
ends, checking with the DUT's own count, where it has one, that the release cleaned up (a gate
reads that). perf records the densest point only by default, which is what symbolize and the
unknown-frame gate need.
"""

from __future__ import annotations

import statistics
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field, field_validator

from labwarden.core.measurements import MeasurementRecord, SweepPoint, SweepRecord
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab import features, workload
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.dut import datamodel
from labwarden.results.associate import AssociateOutput
from labwarden.results.measure import MeasureOutput
from labwarden.results.sweep import SweepOutput
from labwarden.tools import parity
from labwarden.tools.context import LabContext


class SweepInput(ToolInput):
    densities: list[Annotated[int, Field(ge=0, le=4096)]] | None = Field(
        None, min_length=1, max_length=12, examples=[[18, 60, 114]],
        description="workload points (clients, streams), ascending; default: the lab's own "
        "(lab_status `workload.points`: [decision] densities, else the load's -- [0] on a DUT "
        "without a load)")
    reps: int = Field(3, ge=1, le=10)
    window_s: float = Field(10, ge=2, le=300)
    idle_baseline: bool = Field(True, description="also measure each point with no traffic: a "
                                "window with the load stopped where the load is traffic ([load] "
                                "iperf3); a station load's windows are all idle already")
    perf: bool = Field(True, description="perf record at the densest point (first rep)")
    settle_s: float | None = Field(None, ge=0, le=60, description="seconds from associating to "
                                   "the first window at each density (default: [load] settle_s)")
    label: str | None = Field(None, max_length=64, description="stage name for reports, e.g. "
                              "'baseline' or '0901+0902'", examples=["baseline"])

    @field_validator("densities")
    @classmethod
    def _ascending(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (any(d < 0 for d in v) or v != sorted(set(v))):
            raise ValueError("densities must be distinct, >= 0 and ascending, e.g. [18, 60, 114]")
        return v


IDLE_NOTE = ("the load has no traffic to stop: every window runs the held workload as it is (on "
             "a station load: associations only), so idle = loaded")
IDLE_MEASURED = ("idle = the same point with the load stopped (its own windows, measured after the "
                 "loaded ones)")
IDLE_NONE = ("the DUT has no load ([load] kind = \"none\"): its CPU is its own input's, there is "
             "no idle point to measure")


async def run(ctx: LabContext, inp: SweepInput) -> SweepOutput:
    store = RecordStore(ctx.data_dir)
    sid = store.new_id("swp")
    points: list[SweepPoint] = []
    started = datetime.now(UTC)
    check: str | None = None
    load = load_drivers.for_profile(ctx.profile, ctx.device)
    stops = load.stops_traffic
    densities = inp.densities or load_drivers.points(ctx.profile)
    holds = features.missing(ctx.profile, "clients") is None  # else: its own workload, no hold
    try:
        for i, n in enumerate(densities):
            await ctx.report(i, len(densities), f"{load_drivers.label(load, n)} "
                             f"({i + 1}/{len(densities)})")
            per_radio = (await ctx.call("associate", {"stations": n}, AssociateOutput)).per_radio \
                if holds else []
            densest = i == len(densities) - 1
            if densest:  # the declared functional check, with the most clients held
                check = await parity.check_output(ctx)
            window = {"stations": n, "window_s": inp.window_s, "reps": inp.reps, "hold": False,
                      "settle_s": inp.settle_s}
            summary = await ctx.call("measure", {**window, "perf": inp.perf and densest,
                                                 "perf_reps": 1}, MeasureOutput)
            rec = store.load("prof", summary.profile_id, MeasurementRecord)
            idle_cpu = summary.cpu_pct.mean if inp.idle_baseline else None
            if inp.idle_baseline and stops:  # a real baseline: the same point, the load stopped
                await load.hold(0)
                idle = await ctx.call("measure", {**window, "perf": False, "idle": True}, MeasureOutput)
                idle_cpu = idle.cpu_pct.mean
            points.append(SweepPoint(
                stations=n, profile_id=rec.id, cpu_mean=summary.cpu_pct.mean,
                cpu_stdev=summary.cpu_pct.stdev, cpu_per_rep=summary.cpu_pct.per_rep,
                idle_cpu_mean=idle_cpu,
                counters=summary.counters, rss_kb=summary.rss_kb, per_radio=per_radio,
                clients_held=all(w.datamodel_start in (None, n) and w.datamodel_end in (None, n)
                                 for w in rec.windows)))
    finally:  # shielded: a cancelled sweep (anyio cancels every await in its scope) must still
        # leave the DUT with no clients
        if holds:
            await ctx.shielded(ctx.call("associate", {"stations": 0}))
    cleanup = await datamodel.total(ctx.device, ctx.profile)
    record = SweepRecord(id=sid, label=inp.label, started_at=started, window_s=inp.window_s, reps=inp.reps,
                         build_id=ctx.state.verified_build if ctx.state.fingerprint_ok() else None,
                         points=points, cleanup_count=cleanup,
                         idle_note=_idle_note(load, inp.idle_baseline), parity=check,
                         axis=load.axis, place=ctx.place_name, settle_s=inp.settle_s,
                         perf=inp.perf, idle_baseline=inp.idle_baseline)
    store.save("swp", sid, record)
    await ctx.report(len(densities), len(densities), f"sweep {sid} stored")
    return SweepOutput(sweep_id=sid, label=inp.label, build_id=record.build_id, points=points,
                       cleanup_count=cleanup, idle_note=record.idle_note)


def _idle_note(load: load_drivers.LoadDriver, asked: bool) -> str | None:
    if not asked:
        return None
    if load.axis is None:
        return IDLE_NONE
    return IDLE_MEASURED if load.stops_traffic else IDLE_NOTE


def mean_curve(record: SweepRecord) -> list[tuple[int, float]]:
    return [(p.stations, statistics.fmean(p.cpu_per_rep)) for p in record.points]


def _precheck(ctx: LabContext, inp: SweepInput) -> None:
    workload.check(ctx.profile, "densities", inp.densities or [])  # only points the load holds


SPEC = ToolSpec(name="sweep", description=describe(__doc__), input=SweepInput, output=SweepOutput,
                run=run, effect="mutates_dut",
                requires=frozenset({"lease", "board_healthy", "fingerprint_verified", "env_pinned",
                                    "topology_asserted"}),
                budget_class="measure", measures=True,
                free_text=frozenset({"label"}), precheck=_precheck)
"""`label` is a stage name shown in reports ('base HEAD', an experiment's arm): prose, never a
path or a command, so exempt from the identifier check (bounded like any string)."""
