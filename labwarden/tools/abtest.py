"""A/B measurement at one density, shared by `experiment` and `bisect` (a helper, not a tool):
switch the DUT to a build (flash, verify, heal what the flash drifted as the policy allows),
hold the workload point (through the load driver: clients, streams, or
a DUT busy with its own input), measure windows; and the adaptive loop that adds windows until the decision
rule decides or reaches its cap.

Two designs (core/schedule.py decides which from the measured cost of a switch of image, or
the profile's `[decision] interleave` says):
- interleaved: rounds A B, B A, A B... -- each round starts on the build the last one ended on,
  so it costs one flash -- analysed blocked by round (core/decision.judge_blocked): the effect
  comes from A and B inside each round, so a background that moves between rounds cancels;
- blocks (a flash that costs a reboot): A once, at the rule's cap (max_windows), and B adds
  windows against it (Welch) -- an A of min_windows would leave the interval a few degrees of
  freedom, and a no-op could never be called "same"; once B decided, A is measured again
  (`drift_check`: A-B-A) and a lab that moved between the A's makes the verdict unknown.
Each window carries what else ran on the DUT (its CPU outside the target) and the target's own
wait for a CPU; the pre-registered environment rule flags a round whose A and B ran beside
different other work, or a window unlike its block (`environment_shift_pp`; left out only when
`environment_others_action = "drop"`), and leaves out one whose target waited differently
(`environment_wait_pp`) -- always said in the screening, never silently.

Every flash, verification, association and measurement is a nested call (`ctx.call`): guarded
(each flash takes its slot of `flashes_per_hour`), logged under the calling tool's call; the
heal after a flash is the guard's (`ctx.heal`), logged as a guard decision.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable

from labwarden.core.decision import (
    DecisionRule,
    Judgement,
    judge,
    judge_blocked,
    moved,
    next_windows,
    spare_windows,
)
from labwarden.core.errors import LabError, ToolError
from labwarden.core.experiments import Arm, Screening, WindowEnv
from labwarden.core.measurements import MAX_REPS, MeasurementRecord, Window
from labwarden.core.records import RecordStore
from labwarden.core.schedule import Interleave, interleaves
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
        t0 = time.monotonic()
        await ctx.call("flash", {"build_id": build_id})
        out = await ctx.call("fingerprint_verify", {"build_id": build_id}, FingerprintOutput)
        if not out.verified:
            raise ToolError("device", f"build {build_id} did not verify after the flash: "
                            + "; ".join(f"{m.check} {m.path}" for m in out.mismatches[:3]),
                            "lab_status; flash a known image and fingerprint_verify it")
        flashed = True
        mine = ctx.state  # what the next A/B's design is decided on (core/schedule.py)
        mine.switch_s = round(time.monotonic() - t0, 2)
        ctx.save_state(mine)
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


def window_env(w: Window) -> WindowEnv | None:
    """What else ran on the DUT in window `w`, and how long the target waited for a CPU (None:
    neither was read)."""
    k = w.kernel
    if (k is None or not k.per_cpu) and w.wait_pct is None:
        return None
    if k is None or not k.per_cpu:
        return WindowEnv(others_pct=None, wait_pct=w.wait_pct)
    t, cores = k.total, len(k.per_cpu)
    # nice time is left out: niced work yields to the target and fills whatever CPU it leaves
    # idle, so it moves with the patch (a QEMU at nice 19 beside logfilt read +46 pp of "other
    # work" in every B round of a -76% fix, and 12 of 15 windows were left out)
    busy = (t.user_pct + t.system_pct + t.steal_pct) * cores
    return WindowEnv(others_pct=round(max(busy - w.cpu_pct, 0.0), 2),
                     steal_pct=round(t.steal_pct * cores, 2), wait_pct=w.wait_pct)


def _figure(arm: Arm, i: int, fig: str) -> float | None:
    env = arm.env[i] if i < len(arm.env) else None
    if env is None:
        return None
    return env.others_pct if fig == "others" else env.wait_pct


class AB:
    """One adaptive A/B at the workload point `stations` (clients, streams; 0 on a load without an
    axis); `run()` returns its Screening."""

    def __init__(self, ctx: LabContext, a: str, b: str, *, stations: int, rule: DecisionRule,
                 window_s: float, metric: str = "cpu", higher_is_worse: bool = True,
                 margin_pct: float | None = None, interleave: Interleave = True,
                 with_parity: bool = False, reuse_a: Arm | None = None,
                 reuse_from: str | None = None) -> None:
        self.ctx = ctx
        self.rule = rule.resolved(ctx.profile.policy.budgets.flashes_per_hour)
        self.window_s = window_s
        self.metric = metric
        self.higher_is_worse = higher_is_worse
        self.margin_pct = margin_pct
        self.interleave = interleave
        self.interleaved = interleave is True  # decided in run() when "auto"
        self.with_parity = with_parity
        dec = ctx.profile.decision
        self.load_counter = dec.offered_load_counter
        self.env_action: str = getattr(dec, "environment_action", "off")
        self.shift_pp: float | None = None if self.env_action == "off" \
            else getattr(dec, "environment_shift_pp", None)
        self.wait_pp: float = getattr(dec, "environment_wait_pp", 10.0)
        self.others_action: str = getattr(dec, "environment_others_action", "flag")
        self.drift_check: bool = getattr(dec, "drift_check", False)
        self.screening = Screening(stations=stations, window_s=window_s, metric=metric,
                                   a=Arm(build_id=a), b=Arm(build_id=b), looks=[])
        self.parity: dict[str, str | None] = {}
        self.load: load_drivers.LoadDriver | None = None  # bound at the first segment
        self.fresh_boot = False  # switched before the first segment: it settles
        self.reuse_a, self.reuse_from = reuse_a, reuse_from
        self.round_no = 0  # the interleaved design's current round (each window is tagged)

    def _driver(self) -> load_drivers.LoadDriver:
        if self.load is None:
            self.load = load_drivers.for_profile(self.ctx.profile, self.ctx.device)
            self.screening.workload = load_drivers.label(self.load, self.screening.stations)
        return self.load

    async def _segment(self, name: str, arm: Arm, k: int) -> None:
        """k more windows of one arm (switching the DUT to it first when needed)."""
        ctx, n = self.ctx, self.screening.stations
        settle = 0.0
        flashed = await switch_to(ctx, arm.build_id)
        if flashed or self.fresh_boot:  # fresh: switched (and measured) before the first segment
            self.screening.flashes += int(flashed)
            self.fresh_boot = False
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
        arm.env += [window_env(w) for w in rec.windows]
        if self.load_counter is not None:
            arm.load += [w.counters[self.load_counter] for w in rec.windows
                         if self.load_counter in w.counters]
        arm.profile_ids.append(rec.id)
        arm.window_seconds += sum(w.duration_s for w in rec.windows)

    async def _take(self, name: str, arm: Arm, k: int, round_no: int) -> None:
        """k windows of `arm`, each tagged with its round (and an environment, None when the
        measurement gave none)."""
        before = len(arm.values)
        await self._segment(name, arm, k)
        new = len(arm.values) - before
        arm.rounds += [round_no] * new
        arm.env += [None] * (len(arm.values) - len(arm.env))

    async def _measure_a_switch(self) -> None:
        """`interleave = "auto"` on a lab whose switch of image was never measured: one switch
        is made first and measured, so the design rests on a measured cost, not on a guess --
        to B when the board runs A (interleaved, B's round comes first: no flash more), else to
        A. Once per lab: every switch after it keeps `switch_s` current."""
        state = self.ctx.peek_state()
        if self.interleave != "auto" or getattr(state, "switch_s", None) is not None:
            return
        a, b = self.screening.a.build_id, self.screening.b.build_id
        runs_a = state.fingerprint_ok() and state.verified_build == a
        if await switch_to(self.ctx, b if runs_a else a):
            self.screening.flashes += 1
            self.fresh_boot = True

    def _choose_design(self) -> None:
        s, dec = self.screening, self.ctx.profile.decision
        s.switch_s = getattr(self.ctx.peek_state(), "switch_s", None)
        if self.interleave == "auto":
            settle = float(getattr(dec, "settle_s", 0.0))
            self.interleaved = interleaves("auto", s.switch_s, window_s=self.window_s,
                                           step_windows=self.rule.round_step(), settle_s=settle)
            budget = self.rule.round_step() * self.window_s + settle
            s.design_why = ("auto: no switch of image measured on this lab yet" if s.switch_s is None
                            else f"auto: a switch of image took {s.switch_s:g} s "
                            f"{'<=' if self.interleaved else '>'} the {budget:g} s a round adds")
        else:
            self.interleaved = bool(self.interleave)
            s.design_why = f"[decision] interleave = {str(self.interleave).lower()}"
        s.design = "interleaved" if self.interleaved else "blocks"

    def _environment(self) -> tuple[set[tuple[str, int]], str | None]:
        """The environment rule: (windows left out as (arm, index), why the verdict cannot
        stand -- blocks whose A and B ran under different loads). Two figures per window, each
        with its pre-registered limit: the DUT's CPU outside the target (`shift_pp`: flagged,
        or dropped when `others_action` says so) and the target's own wait for a CPU
        (`wait_pp`: dropped). Notes go to the screening, each saying what was done."""
        s = self.screening
        out: set[tuple[str, int]] = set()
        notes: list[str] = []  # each begins with what was done: "left out: " or "flagged (kept): "
        if self.shift_pp is None:
            return out, None
        drop = self.env_action == "drop"
        limits = {"others": (self.shift_pp, "of other work", drop and self.others_action == "drop"),
                  "wait": (self.wait_pp, "of waiting for a CPU", drop)}
        arms = {"a": s.a, "b": s.b}
        rounds = sorted({r for arm in arms.values() for r in arm.rounds})
        spoilt: str | None = None
        for r in rounds:
            for fig, (limit, words, drops) in limits.items():
                verb = "left out: " if drops else "flagged (kept): "
                medians: dict[str, float] = {}
                for name, arm in arms.items():
                    seen = {i: v for i, rr in enumerate(arm.rounds)
                            if rr == r and (v := _figure(arm, i, fig)) is not None}
                    if not seen:
                        continue
                    med = statistics.median(seen.values())
                    medians[name] = med
                    for i, v in seen.items():
                        if abs(v - med) > limit:
                            if drops:
                                out.add((name, i))
                            notes.append(f"{verb}{name.upper()} window {i + 1}: {v:.0f}% of a "
                                         f"core {words} against its block's {med:.0f}%")
                if len(medians) == 2 and abs(medians["a"] - medians["b"]) > limit:
                    what = (f"A ran with {medians['a']:.0f}% of a core {words}, B with "
                            f"{medians['b']:.0f}%")
                    if self.interleaved:
                        if drops:
                            out |= {(n, i) for n, arm in arms.items()
                                    for i, rr in enumerate(arm.rounds) if rr == r}
                        notes.append(f"{verb}round {r + 1}: {what}")
                    elif drops:
                        spoilt = f"unknown: the environment moved between A and B ({what})"
                        notes.append(f"{verb}{spoilt}")
                    else:
                        notes.append(f"{verb}between A and B: {what}")
        s.environment = list(dict.fromkeys(notes))
        return out, spoilt

    def _look(self) -> Judgement:
        s = self.screening
        left, spoilt = self._environment()
        s.a.left_out = sorted(i for n, i in left if n == "a")
        s.b.left_out = sorted(i for n, i in left if n == "b")

        def kept(arm: Arm) -> tuple[list[float], list[int]]:
            idx = [i for i in range(len(arm.values)) if i not in arm.left_out]
            rounds = arm.rounds if len(arm.rounds) == len(arm.values) else [0] * len(arm.values)
            return [arm.values[i] for i in idx], [rounds[i] for i in idx]

        (a, ra), (b, rb) = kept(s.a), kept(s.b)
        # the cap counts kept windows; a window left out is replaced, up to spare_windows more
        # taken per arm (lab time is bounded either way)
        taken = (min(len(a), len(b)) >= self.rule.max_windows
                 or self._at_limit(s.b) or (self.interleaved and self._at_limit(s.a)))
        if len(a) < self.rule.min_windows or len(b) < self.rule.min_windows:
            # a look needs min_windows per arm, kept ones: fewer, and the interval rests on a
            # degree of freedom or two (a logfilt no-op read "improved" -8.3% on 2+3 kept)
            look = judge(s.a.values, s.b.values, self.rule, higher_is_worse=self.higher_is_worse,
                         margin_pct=self.margin_pct)
            return look.model_copy(update={
                "verdict": "unknown", "decided": taken, "note": "too few windows left after "
                "the environment rule: " + "; ".join(s.environment[:3])})
        if self.interleaved:
            look = judge_blocked(a, b, ra, rb, self.rule, higher_is_worse=self.higher_is_worse,
                                 margin_pct=self.margin_pct)
        else:
            look = judge(a, b, self.rule, higher_is_worse=self.higher_is_worse,
                         margin_pct=self.margin_pct)
        update: dict[str, object] = {"decided": look.decided or taken}
        if spoilt is not None:
            update.update(verdict="unknown", note=spoilt)
        elif left:
            update["note"] = f"{len(left)} window(s) left out by the environment rule"
        return look.model_copy(update=update)

    def _limit(self) -> int:
        """Windows an arm may take in all: the cap plus the replacements."""
        return self.rule.max_windows + spare_windows(self.rule)

    def _at_limit(self, arm: Arm) -> bool:
        return len(arm.values) >= self._limit()

    def _want(self, name: str, arm: Arm, target: int) -> int:
        """Windows `arm` should have taken for a look at `target` kept ones: the target plus the
        windows the environment rule left out (interleaved: the larger count of either arm, so a
        replacement round holds both), never past the limit. Blocks take A once, at the cap."""
        if not self.interleaved and name == "a":
            return max(self.rule.max_windows, len(arm.values))
        s = self.screening
        out = len(arm.left_out) if not self.interleaved else max(len(s.a.left_out),
                                                                  len(s.b.left_out))
        return min(target + out, self._limit())

    def _short(self, target: int) -> bool:
        """Some arm holds fewer kept windows than this look's target and may still replace."""
        s = self.screening
        arms = [s.a, s.b] if self.interleaved else [s.b]
        return any(len(arm.values) - len(arm.left_out) < target and not self._at_limit(arm)
                   for arm in arms)

    def _moved(self, before: list[float], now: list[float]) -> Judgement | None:
        """The two measurements of one build disagree: the rule's interval excludes 0 and the
        change is beyond the band (the lab moved between them). None when they agree."""
        return moved(before, now, self.rule, margin_pct=self.margin_pct)

    async def _reuse(self) -> None:
        """Blocks: A's windows of an earlier screening stand in for A's block when a check of
        min_windows windows of A now agrees with them; otherwise the check's windows start A
        anew. Said in the screening either way."""
        s, old = self.screening, self.reuse_a
        if old is None:
            return
        if self.interleaved:
            s.a_reuse = ("not reused: interleaved, A is measured in every round beside B "
                         f"(windows of {self.reuse_from} left alone)")
            return
        check = Arm(build_id=s.a.build_id)
        await self._take("a", check, self.rule.min_windows, round_no=0)
        moved = self._moved(old.values, check.values)
        if moved is not None:
            s.a.values, s.a.env, s.a.rounds = check.values, check.env, check.rounds
            s.a.profile_ids, s.a.load = check.profile_ids, check.load
            s.a.window_seconds = check.window_seconds
            s.a_reuse = (f"not reused: the check of A now reads {moved.delta_pct:+.1f}% from "
                         f"{self.reuse_from}'s ({moved.interval_text()}): A measured anew")
            return
        s.a = Arm(build_id=s.a.build_id, values=old.values + check.values,
                  env=[*old.env, *[None] * (len(old.values) - len(old.env)), *check.env],
                  rounds=[0] * (len(old.values) + len(check.values)),
                  load=old.load + check.load, profile_ids=old.profile_ids + check.profile_ids,
                  window_seconds=check.window_seconds)  # only the check's are this call's time
        s.a_reused_from = self.reuse_from
        s.a_reuse = (f"reused {len(old.values)} window(s) of A from {self.reuse_from}; a check "
                     f"of {len(check.values)} agreed")

    async def _again(self, look: Judgement) -> Judgement:
        """A-B-A: A measured again after B decided; a lab that moved between the two A's beyond
        the band (and beyond the rule's interval) makes the verdict unknown."""
        s = self.screening
        s.a_again = Arm(build_id=s.a.build_id)
        await self._take("a", s.a_again, self.rule.min_windows, round_no=1)
        first = [v for i, v in enumerate(s.a.values) if i not in s.a.left_out]
        again = self._moved(first, s.a_again.values)
        if again is None:
            return look
        return look.model_copy(update={
            "verdict": "unknown", "decided": True,
            "note": f"unknown: the lab moved -- A again after B reads {again.delta_pct:+.1f}% "
                    f"from A before B ({again.interval_text()}, band +-{again.margin_pct:g}%)"})

    async def _fill(self, arms: dict[str, Arm], order: list[str], target: int) -> None:
        """Windows until each arm holds what the look at `target` wants (_want). Blocks: in one
        go. Interleaved: in rounds -- `round_windows` per arm each (1: pairs), else all of the
        look's in one round -- every round starting on the build the last one ended on (one
        switch per round: `order` is reversed after each)."""
        per_round = self.rule.per_round() if self.interleaved else None
        while True:
            wants = {name: self._want(name, arms[name], target) - len(arms[name].values)
                     for name in order}
            for name in order:
                k = wants[name] if per_round is None else min(wants[name], per_round)
                if k > 0:
                    await self._take(name, arms[name], k, self.round_no)
            if not self.interleaved:
                return
            self.round_no += 1
            order.reverse()
            if per_round is None or all(k <= per_round for k in wants.values()):
                return

    async def run(self, on_look: Callable[[str], Awaitable[None]] | None = None) -> Screening:
        t0 = time.monotonic()
        s = self.screening
        try:
            await self._measure_a_switch()
            self._choose_design()
            await self._reuse()
            arms = {"a": s.a, "b": s.b}
            state = self.ctx.peek_state()
            on_b = self.interleaved and state.fingerprint_ok() \
                and state.verified_build == s.b.build_id
            order = ["b", "a"] if on_b else ["a", "b"]  # start on the image that runs
            target = self.rule.min_windows
            while True:
                await self._fill(arms, order, target)
                look = self._look()
                if not look.decided and self._short(target):
                    # windows left out are replaced before this look counts: the looks (and
                    # the alpha each spends) stay the planned ones
                    continue
                if look.decided and not self.interleaved and self.drift_check \
                        and look.verdict != "unknown":
                    look = await self._again(look)
                s.looks.append(look)
                if on_look is not None:
                    await on_look(look.describe())
                if look.decided:
                    return s
                target = next_windows(target, self.rule)
        finally:
            s.seconds = round(time.monotonic() - t0, 2)
