"""calibrate: measure this lab's own A/A noise on the running (verified) build at the densest
workload point -- `windows` windows of `[decision] window_s`, taken as an A/B takes them -- and
say what the profile's decision rule can decide on it: the noise per window, its drift, the
false "different" and the "same" rates on no-ops, the smallest effect found in 90% of draws,
the windows and lab minutes a candidate costs, and when min_effect_pct cannot be decided, a
[decision] that can (TOML lines to paste). Run it before a night: the loop refuses to start on
a rule it cannot decide.

The windows are nested `measure` calls (at most 10 windows each) with the workload held as an
A/B holds it; the simulation (core/calibration.py) runs on them in the design the lab would get
(core/schedule.py). Stored as a record (kind cal) with its conditions and windows. Mutates DUT
state (its load) and leaves the DUT with no load when it ends; flashes nothing.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from pydantic import Field

from labwarden.core import calibration
from labwarden.core.decision import DecisionRule
from labwarden.core.errors import ToolError
from labwarden.core.measurements import MAX_REPS, MeasurementRecord
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab import features
from labwarden.lab.drivers import load as load_drivers
from labwarden.results.calibrate import CalibrateOutput
from labwarden.results.measure import MeasureOutput
from labwarden.tools import abtest
from labwarden.tools.context import LabContext


class CalibrateInput(ToolInput):
    windows: int | None = Field(None, ge=8, le=400, examples=[36], description="windows to "
                                "record (default: 2 x [decision] max_windows + 6, one comparison "
                                "at the cap and a few)")
    draws: int = Field(1000, ge=100, le=5000, description="simulated comparisons per case at "
                       "most (a short recording holds fewer: all of them are used then)")
    seed: int = Field(1, ge=0, le=2**31 - 1, description="seed of the simulation's draws")
    switch_s: float | None = Field(None, ge=0, le=3600, description="seconds one switch of image "
                                   "(flash + fingerprint verify) costs, for the design and the "
                                   "lab minutes (default: the board state's measured one)")


def default_windows(rule: DecisionRule) -> int:
    return 2 * rule.max_windows + calibration.EXTRA_WINDOWS


async def run(ctx: LabContext, inp: CalibrateInput) -> CalibrateOutput:
    prof, dec = ctx.profile, ctx.profile.decision
    rule = calibration.rule_of(dec, prof.policy.budgets.flashes_per_hour)
    state = ctx.peek_state()
    build = state.verified_build
    if build is None:  # the guard requires a verified board; this is its belt and braces
        raise ToolError("refused", "no verified build runs", "fingerprint_verify the running build")
    n = inp.windows or default_windows(rule)
    stations = load_drivers.points(prof)[-1]
    load = load_drivers.for_profile(prof, ctx.device)
    where = load_drivers.label(load, stations)
    holds = features.missing(prof, "clients") is None  # else: the DUT's own workload
    switch_s = inp.switch_s if inp.switch_s is not None else state.switch_s
    store = RecordStore(ctx.data_dir)
    cid = store.new_id("cal")
    started = datetime.now(UTC)
    values: list[float] = []
    starts: list[datetime] = []
    pids: list[str] = []
    measuring = 0.0
    t0 = time.monotonic()
    try:
        if holds and not await load_drivers.is_held(load, ctx.device, prof, stations):
            await ctx.call("associate", {"stations": stations})
        settle = dec.settle_s  # after a flash or an association: start-up stays out
        while len(values) < n:
            reps = min(MAX_REPS, n - len(values))
            await ctx.report(len(values), n, f"{where}: windows {len(values) + 1}-"
                             f"{len(values) + reps} of {n} ({dec.window_s:g} s)")
            t_call = time.monotonic()
            out = await ctx.call("measure", {
                "stations": stations, "window_s": dec.window_s, "reps": reps, "perf": False,
                "uprobes": dec.offered_load_counter is not None, "settle_s": settle,
                "hold": False}, MeasureOutput)  # the instruments of an A/B's windows
            measuring += time.monotonic() - t_call - settle
            rec = store.load("prof", out.profile_id, MeasurementRecord)
            bad = [w.rep for w in rec.windows if w.restarted or w.datamodel_end not in (None, stations)]
            if bad:
                raise ToolError("device", f"the target restarted or the workload was lost in "
                                f"window(s) {bad} of {rec.id}", "read the daemon's log on the "
                                "DUT (lab_status); a lab that loses its workload cannot be calibrated")
            values += abtest.metric_values(rec, "cpu")
            starts += [w.started_at for w in rec.windows]
            pids.append(rec.id)
            settle = 0.0
    finally:  # shielded: a cancelled calibration still leaves the DUT with no clients
        if holds:
            await ctx.shielded(ctx.call("associate", {"stations": 0}))
    measure_s = round(time.monotonic() - t0, 2)
    lab_time = calibration.LabTime(window_s=dec.window_s, settle_s=dec.settle_s, switch_s=switch_s,
                                   overhead_s=round(max(0.0, measuring / n - dec.window_s), 3))
    offsets = [round((s - starts[0]).total_seconds(), 3) for s in starts]
    drift_check = dec.drift_check
    await ctx.report(n, n, f"{n} windows recorded; simulating the rule on them")
    cal = await asyncio.to_thread(calibration.calibrate, values, offsets, rule,
                                  interleave=dec.interleave, switch_s=switch_s, time=lab_time,
                                  drift_check=drift_check, draws=inp.draws, seed=inp.seed)
    store.save("cal", cid, calibration.CalibrationRecord(
        id=cid, started_at=started, build_id=build, place=ctx.place_name, stations=stations,
        workload=where, window_s=dec.window_s, settle_s=dec.settle_s, interleave=dec.interleave,
        drift_check=drift_check, switch_s=switch_s, design=cal.design, rule=rule, values=values,
        offsets_s=offsets, profile_ids=pids, measure_s=measure_s, draws=inp.draws, seed=inp.seed,
        result=cal))
    await ctx.report(n, n, f"calibration {cid} stored")
    return CalibrateOutput(**cal.model_dump(), calibration_id=cid, build_id=build,
                           place=ctx.place_name, workload=where, switch_s=switch_s)


SPEC = ToolSpec(name="calibrate", description=describe(__doc__), input=CalibrateInput,
                output=CalibrateOutput, run=run, effect="mutates_dut",
                requires=frozenset({"lease", "board_healthy", "fingerprint_verified", "env_pinned",
                                    "topology_asserted"}),
                budget_class="measure", measures=True)
