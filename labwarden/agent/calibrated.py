"""Before a night: the loop starts only on a decision rule this lab can decide.

At start the loop looks for the newest calibration (records kind cal, the `calibrate` tool's) of
this lab's place and its base build (the firmware at HEAD: an experiment's A), taken with the
current [decision] (the rule, window_s, settle_s, the workload point, the design the lab gets)
and no older than a pre-registered age. Without one, it puts the base on the board (flash and
fingerprint_verify, only when it does not run there verified) and calls `calibrate` -- each a
tool call of the loop's session, guarded and logged like the model's. When the calibration says
min_effect_pct is not decidable, the loop refuses to start, and the remedy is the suggested
[decision]. Skipping it is an explicit choice, written in the transcript and the summary.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from labwarden.core.calibration import CalibrationRecord, design_of, fits, rule_of
from labwarden.core.call import ToolCallRecord
from labwarden.core.errors import LabError
from labwarden.core.events import Note
from labwarden.core.records import RecordStore, RecordUnreadable
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.host.builds import compiled, recipe
from labwarden.results.calibrate import CalibrateOutput
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import LabSession
from labwarden.tools.context import failure

MAX_AGE_H = 24.0
"""How old a calibration may be for a night to rest on it, unless the loop is told otherwise."""

OnCall = Callable[[ToolCallRecord], Awaitable[None] | None]


@dataclass
class CalibrationPolicy:
    """What the loop requires of a calibration before it starts (pre-registered: given on the
    command line, written in the run's config note)."""

    max_age_h: float = MAX_AGE_H
    skip: bool = False
    """Start without one: written in the transcript and in the summary, for an auditor."""


class Undecidable(LabError):
    """The calibration says the profile's rule cannot decide min_effect_pct on this lab."""

    kind = "refused"


def newest_fitting(ctx: LabSession, base: str, max_age_h: float) -> tuple[CalibrationRecord | None, str]:
    """The newest calibration that speaks for tonight, or None and why the newest does not."""
    prof, dec = ctx.profile, ctx.profile.decision
    rule = rule_of(dec, prof.policy.budgets.flashes_per_hour)
    design = design_of(dec.interleave, ctx.peek_state().switch_s, rule,
                       window_s=dec.window_s, settle_s=dec.settle_s)
    store = RecordStore(ctx.data_dir)
    oldest = datetime.now(UTC) - timedelta(hours=max_age_h)
    why = "none on this lab yet"
    for cid in reversed(store.ids("cal")):
        try:
            rec = store.load("cal", cid, CalibrationRecord)
        except RecordUnreadable:
            continue
        if rec.started_at < oldest:
            return None, why if why != "none on this lab yet" else \
                f"the newest, {rec.id}, is older than {max_age_h:g} h"
        miss = fits(rec, build_id=base, place=ctx.place_name, stations=load_drivers.points(prof)[-1],
                    rule=rule, window_s=dec.window_s, settle_s=dec.settle_s, design=design,
                    drift_check=dec.drift_check)
        if miss is None:
            return rec, ""
        if why == "none on this lab yet":
            why = f"the newest, {rec.id}, was taken otherwise: {miss}"
    return None, why


async def _call(ctx: LabSession, name: str, args: dict[str, Any], on_call: OnCall | None) -> ToolCallRecord:
    rec = await call_tool(ctx, name, args)
    if on_call is not None:
        res = on_call(rec)
        if res is not None:
            await res
    if not rec.ok:
        raise failure(rec)
    return rec


async def base_build(ctx: LabSession) -> str:
    """The build id of the profile's base: the firmware at HEAD, no patch (an experiment's A);
    built when the host has not built it yet."""
    manifest, _ = await compiled(recipe(ctx.profile), [], "HEAD")
    return manifest.build_id


async def put_on_board(ctx: LabSession, base: str, on_call: OnCall | None = None) -> None:
    """`base` running, verified: nothing when it is; verified when it is what was flashed (the
    board state says so, a fresh vlab's too); else flashed and verified. Each step a guarded,
    logged tool call; a verification is never asked of a build the board may not run (a
    failed one would clear the board's)."""
    state = ctx.peek_state()
    if state.fingerprint_ok() and state.verified_build == base:
        return
    if state.flashed_build == base:
        rec = await _call(ctx, "fingerprint_verify", {"build_id": base}, on_call)
        if rec.result and rec.result.get("verified"):
            return
    ctx.log(Note(author="labwarden", text=f"calibration: flashing the base {base} (the board ran "
                 f"{state.verified_build or state.flashed_build or 'an unknown image'})"))
    await _call(ctx, "flash", {"build_id": base}, on_call)
    rec = await _call(ctx, "fingerprint_verify", {"build_id": base}, on_call)
    if not (rec.result and rec.result.get("verified")):
        raise LabError(f"the base {base} did not verify after its flash: the loop cannot calibrate",
                       "lab_status; flash a known image and fingerprint_verify it", kind="device")


def refusal(rec: CalibrationRecord, source: str | None) -> Undecidable:
    cal, r = rec.result, rec.rule
    s = cal.suggestion
    toml = s.toml if s is not None else []
    problem = (f"the loop refuses to start: [decision] min_effect_pct = {r.min_effect_pct:g} is not "
               f"decidable on this lab -- calibration {rec.id} finds a {r.min_effect_pct:g}% effect "
               f"in {cal.at_min_effect.improved_pct:.0f}% of draws within max_windows = "
               f"{r.max_windows} (>= 90% needed; noise {cal.noise.cv_pct:.1f}% per "
               f"{rec.window_s:g} s window at {rec.workload}, {cal.design} design)")
    where = f"[decision] of {source}" if source else "the lab profile's [decision]"
    if s is not None and s.power_pct is not None:
        how = (f"set {', '.join(toml[1:])} in {where} (finds it in {s.power_pct:.0f}% of draws, "
               f"~{s.minutes:.1f} lab minutes per candidate; estimated from {s.basis})")
    elif s is not None:
        how = (f"no window_s / max_windows tried reaches it: set {', '.join(toml[1:])} in {where} "
               "(the effect this lab can decide), or quiet the lab")
    else:
        how = f"widen {where} (min_effect_pct, window_s or max_windows)"
    return Undecidable(problem, f"{how}; then start the loop again: it calibrates anew",
                       lines=toml)


async def ensure(ctx: LabSession, policy: CalibrationPolicy, *, fleet: bool = False,
                 on_call: OnCall | None = None) -> dict[str, Any]:
    """The night's calibration, found or made; raises Undecidable when the rule cannot decide
    min_effect_pct here. Returns what the run's config note and summary carry about it."""
    if policy.skip:
        text = ("calibration skipped (--skip-calibration): this night's rule was not checked "
                "against the lab's own noise")
        ctx.log(Note(author="labwarden", text=text))
        return {"skipped": True, "max_age_h": policy.max_age_h, "line": text}
    if fleet:
        text = ("calibration not checked: the loop calibrates one board, and this lab is a fleet "
                "(calibrate each place with the calibrate tool)")
        ctx.log(Note(author="labwarden", text=text))
        return {"skipped": False, "fleet": True, "max_age_h": policy.max_age_h, "line": text}
    base = await base_build(ctx)
    rec, why = newest_fitting(ctx, base, policy.max_age_h)
    if rec is None:
        ctx.log(Note(author="labwarden", text=f"calibration: no calibration of the base {base} "
                     f"with tonight's [decision] in the last {policy.max_age_h:g} h ({why}): "
                     "calibrating before the night"))
        await put_on_board(ctx, base, on_call)
        made = await _call(ctx, "calibrate", {}, on_call)
        out = made.output if isinstance(made.output, CalibrateOutput) else \
            CalibrateOutput.model_validate(made.result)
        rec = RecordStore(ctx.data_dir).load("cal", out.calibration_id, CalibrationRecord)
        # the board's state may have moved under the calibration (a flash measured switch_s):
        # it is the record's own settings that are judged, as calibrate took them
    age = datetime.now(UTC) - rec.started_at
    line = (f"{rec.id} ({age.total_seconds() / 60:.0f} min old, base {rec.build_id}): "
            f"{rec.result.summary}")
    if not rec.result.decidable:
        err = refusal(rec, ctx.profile.source)
        ctx.log(Note(author="labwarden", text=f"{err.problem} -- remedy: {err.remedy}"))
        raise err
    ctx.log(Note(author="labwarden", text=f"calibration {line}"))
    return {"skipped": False, "record": rec.id, "max_age_h": policy.max_age_h, "line": line}
