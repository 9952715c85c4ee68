"""A/B measurement at one density, shared by `experiment` and `bisect` (a helper, not a tool):
switch the DUT to a build (flash, verify, heal what the flash drifted as the policy allows),
hold the workload point (through the load driver: clients, streams, or
a DUT busy with its own input), measure windows; and the adaptive loop that adds windows until the decision
rule decides or reaches its cap.

With `[decision] interleave` (a cheap flash, as on the vlab) the rounds go A B, B A, A B...:
each round starts on the build the last one ended on, so it costs one flash, and drift over
time hits both arms alike. Without it (a flash that costs a reboot), A is measured once, at the
rule's cap (max_windows), and B adds windows against it: no flash after the first two, and A's
mean as settled as it can be -- an A of min_windows would leave Welch's interval a few degrees
of freedom, and a no-op could never be called "same".

Every flash, verification, association and measurement is a nested call (`ctx.call`): guarded
(each flash takes its slot of `flashes_per_hour`), logged under the calling tool's call; the
heal after a flash is the guard's (`ctx.heal`), logged as a guard decision.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from labwarden.core.decision import DecisionRule, judge, next_windows
from labwarden.core.errors import LabError, ToolError
from labwarden.core.experiments import Arm, Screening
from labwarden.core.measurements import MAX_REPS, MeasurementRecord
from labwarden.core.records import RecordStore
from labwarden.lab import features
from labwarden.lab.drivers import load as load_drivers
from labwarden.results.fingerprint import FingerprintOutput
from labwarden.results.measure import MeasureOutput
from labwarden.tools import parity
from labwarden.tools.context import LabContext


class ParityMismatch(LabError):
    """A and B printed different things for the declared parity check."""

    kind = "refused"


async def switch_to(ctx: LabContext, build_id: str) -> bool:
    """Make `build_id` the verified image on the DUT (flash only when it is not), then heal
    what the flash's reboot drifted. Returns whether it flashed."""
    state = ctx.peek_state()
    flashed = False
    if not (state.fingerprint_ok() and state.verified_build == build_id):
        await ctx.call("flash", {"build_id": build_id})
        out = await ctx.call("fingerprint_verify", {"build_id": build_id}, FingerprintOutput)
        if not out.verified:
            raise ToolError("device", f"build {build_id} did not verify after the flash: "
                            + "; ".join(f"{m.check} {m.path}" for m in out.mismatches[:3]),
                            "lab_status; flash a known image and fingerprint_verify it")
        flashed = True
    changes = await ctx.heal()  # a guard decision when something drifted (a flash reboots)
    if changes:
        await ctx.report(0, None, "healed after the flash: " + ", ".join(changes))
    return flashed


async def leave_on(ctx: LabContext, build_id: str | None, what: str, *,
                   spent: str | None = None) -> tuple[str | None, str]:
    """Leave the board on `build_id` at the end of a tool that flashed several builds (the
    kept stack, or the base): through `switch_to` -- the same nested flash + fingerprint_verify,
    so the guard, the flash budget and the board state stay right. Returns the build the board
    is left verified on (None when not known) and why, in words. `spent`: the guard already
    refused a flash of this call for the flash budget (its reason) -- no flash is tried then; a
    flash back the guard refuses or that fails leaves the board where it is and says so. Never
    raises a LabError: the tool's verdict stands either way."""
    state = ctx.peek_state()
    here = state.verified_build if state.fingerprint_ok() else None
    where = f" on {ctx.place_name}" if ctx.place_name else ""
    if build_id is None:
        return here, f"left{where} on {here or 'an unverified image'}: nothing was built"
    if here == build_id:
        return here, f"left{where} on {build_id}, {what} (already running)"
    if spent is not None:
        return here, (f"left{where} on {here or 'an unverified image'}, not {what} {build_id}: "
                      f"the guard's budget is spent ({spent})")
    try:
        await switch_to(ctx, build_id)
    except LabError as exc:
        state = ctx.peek_state()
        now = state.verified_build if state.fingerprint_ok() else None
        return now, (f"left{where} on {now or 'an unverified image'}: flashing {what} "
                     f"{build_id} back failed ({exc.problem})")
    return build_id, f"left{where} on {build_id}, {what} (flashed back and verified)"


def budget_spent(exc: LabError) -> str | None:
    """A budget's refusal (flashes per hour, tool calls, ...), when `exc` is one: then no
    flash back is tried."""
    return exc.problem if exc.code == "budget_exceeded" else None


def metric_values(rec: MeasurementRecord, metric: str) -> list[float]:
    if metric == "cpu":
        return [w.cpu_pct for w in rec.windows]
    missing = [w.rep for w in rec.windows if metric not in w.counters]
    if missing:
        raise ToolError("device", f"counter {metric} was not measured (uprobes unavailable?)",
                        "use metric 'cpu', or a DUT with tracefs and uprobes")
    return [w.counters[metric] for w in rec.windows]


class AB:
    """One adaptive A/B at the workload point `stations` (clients, streams; 0 on a load without an
    axis); `run()` returns its Screening."""

    def __init__(self, ctx: LabContext, a: str, b: str, *, stations: int, rule: DecisionRule,
                 window_s: float, metric: str = "cpu", higher_is_worse: bool = True,
                 margin_pct: float | None = None, interleave: bool = True,
                 with_parity: bool = False) -> None:
        self.ctx = ctx
        self.rule = rule
        self.window_s = window_s
        self.metric = metric
        self.higher_is_worse = higher_is_worse
        self.margin_pct = margin_pct
        self.interleave = interleave
        self.with_parity = with_parity
        self.load_counter = ctx.profile.decision.offered_load_counter
        self.screening = Screening(stations=stations, window_s=window_s, metric=metric,
                                   a=Arm(build_id=a), b=Arm(build_id=b), looks=[])
        self.parity: dict[str, str | None] = {}
        self.load: load_drivers.LoadDriver | None = None  # bound at the first segment

    def _driver(self) -> load_drivers.LoadDriver:
        if self.load is None:
            self.load = load_drivers.for_profile(self.ctx.profile, self.ctx.device)
            self.screening.workload = load_drivers.label(self.load, self.screening.stations)
        return self.load

    async def _segment(self, name: str, arm: Arm, k: int) -> None:
        """k more windows of one arm (switching the DUT to it first when needed)."""
        ctx, n = self.ctx, self.screening.stations
        settle = 0.0
        if await switch_to(ctx, arm.build_id):
            self.screening.flashes += 1
            settle = ctx.profile.decision.settle_s  # a new boot's first seconds are start-up
        load = self._driver()
        holds = features.missing(ctx.profile, "clients") is None  # else: its own workload
        if holds and not await load_drivers.is_held(load, ctx.device, ctx.profile, n):
            await ctx.call("associate", {"stations": n})
            settle = ctx.profile.decision.settle_s
        if self.with_parity and name not in self.parity:
            self.parity[name] = await parity.check_output(ctx)
            other = self.parity.get("b" if name == "a" else "a", "unset")
            if other != "unset" and other != self.parity[name]:
                gate = parity.functional(self.parity.get("a"), self.parity.get("b"))
                raise ParityMismatch(f"functional parity: {gate.evidence}",
                                     "the patch changes what the daemon answers: keep its output "
                                     "identical (the profile's parity_check)")
        await ctx.report(len(arm.values), None, f"{name.upper()} ({arm.build_id}): {k} window(s) "
                         f"of {self.window_s:g} s at {self.screening.workload}")
        while k > 0:  # a measure call takes at most MAX_REPS windows
            reps = min(k, MAX_REPS)
            await self._measure(name, arm, n, reps, settle)
            k, settle = k - reps, 0.0

    async def _measure(self, name: str, arm: Arm, n: int, reps: int, settle: float) -> None:
        ctx = self.ctx
        out = await ctx.call("measure", {
            "stations": n, "window_s": self.window_s, "reps": reps, "perf": False,
            "uprobes": self.load_counter is not None or self.metric != "cpu", "settle_s": settle,
            "hold": False}, MeasureOutput)  # held above, through the load driver
        rec = RecordStore(ctx.data_dir).load("prof", out.profile_id, MeasurementRecord)
        # the DUT's count where it has one (None: not measured here, nothing to compare)
        bad = [w.rep for w in rec.windows if w.restarted or w.datamodel_end not in (None, n)]
        if bad:
            raise ToolError("device", f"{name.upper()} ({arm.build_id}): the target restarted or "
                            f"the workload was lost in window(s) {bad} (does the build crash?)",
                            "read the daemon's log on the DUT; such a build cannot be judged")
        arm.values += metric_values(rec, self.metric)
        if self.load_counter is not None:
            arm.load += [w.counters[self.load_counter] for w in rec.windows
                         if self.load_counter in w.counters]
        arm.profile_ids.append(rec.id)
        arm.window_seconds += sum(w.duration_s for w in rec.windows)

    async def run(self, on_look: Callable[[str], Awaitable[None]] | None = None) -> Screening:
        t0 = time.monotonic()
        s = self.screening
        arms = {"a": s.a, "b": s.b}
        state = self.ctx.peek_state()
        on_b = self.interleave and state.fingerprint_ok() and state.verified_build == s.b.build_id
        order = ["b", "a"] if on_b else ["a", "b"]  # start on the image that runs: one flash less
        target = self.rule.min_windows
        try:
            while True:
                for name in order:
                    arm = arms[name]
                    if self.interleave or name == "b":
                        want = target
                    else:  # A once, at the cap; B adds windows against it
                        want = max(self.rule.max_windows, len(arm.values))
                    if want > len(arm.values):
                        await self._segment(name, arm, want - len(arm.values))
                look = judge(s.a.values, s.b.values, self.rule, higher_is_worse=self.higher_is_worse,
                             margin_pct=self.margin_pct)
                s.looks.append(look)
                if on_look is not None:
                    await on_look(look.describe())
                if look.decided:
                    return s
                target = next_windows(target, self.rule)
                if self.interleave:
                    order.reverse()  # start where the last round ended: one flash per round
        finally:
            s.seconds = round(time.monotonic() - t0, 2)
