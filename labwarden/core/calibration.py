"""What a decision rule can decide on a lab, worked out from a recording of the lab's own A/A
noise: one build measured for N windows at the densest workload point (the `calibrate` tool
records it; bench/decision.py reads the same numbers). Pure: windows in, numbers out, no lab.

Each simulated comparison is the A/B the lab would run, in the design it would get
(core/schedule.py), built from the recording the way the lab takes its windows, so the drift
and autocorrelation the recording holds reach the simulation:
- blocked (interleaved): round 0 holds min_windows of A and then of B, each later round
  step_windows of each, the order alternating (A B, B A, ...); the rounds are consecutive
  windows of the recording from a random start (A first or B first, at random);
- independent (blocks): A's block of max_windows, then B's windows after it, in time order;
  with `drift_check`, A again (min_windows) after a verdict other than unknown, as the A-B-A
  of tools/abtest.py. (Its reuse of an earlier screening's A, and the environment rule's windows
  left out, are not simulated: the recording holds no second build and no environment.)
B's windows are scaled by (1 - effect). A comparison starts at any window of the recording (and,
interleaved, with A or B first) and wraps around to the recording's start where it runs past
its end. A draw of windows at random (the first bench/decision.py) makes A and B
exchangeable: it hides exactly what the independent design suffers from, a lab that moves
between A's block and B's.

A recording of N windows holds N such comparisons (2N interleaved), about N / (2 max_windows)
of them sharing no window: the rates are averages over the comparisons the recording holds
(all of them when there are no more than the draws asked for, else that many at random), and
`distinct_starts` says how many there were. Longer windows are estimated by summing
consecutive windows of the same recording (their noise as measured, drift included, not
sd / sqrt(k)).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, Field

from labwarden.core.decision import DecisionRule, Design, judge, judge_blocked, moved
from labwarden.core.schedule import Interleave, interleaves

POWER = 0.9
"""An effect is decidable when the rule finds it ("improved") in at least this share of draws
within its cap."""
SURE_Z = 1.645
"""A suggested [decision] must find min_effect_pct in POWER of the draws at this confidence (one
sided, 95%): not an estimate that happened to land on 90%, since the calibration that confirms
it (the loop's, once it is pasted) takes new windows."""
EFFECTS_PCT = (2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0)
"""The effects searched for the smallest one the rule finds."""
SEARCH_DRAWS = 300
"""Draws per configuration a suggestion tries at most (SURE_Z makes up for the fewer draws)."""
LONGER = (1, 2, 4)
"""Window lengths a suggestion tries, as multiples of the recorded window."""
CAPS = (5, 7, 9, 11, 13, 15, 20, 25, 30, 40, 50, 60, 80, 100)
"""max_windows a suggestion tries (the rule allows up to 200; past 100 a comparison costs more
lab time than a night holds for many candidates)."""
EXTRA_WINDOWS = 6
"""The calibrate tool's default recording: 2 x max_windows (one comparison at the cap) and these."""


class Noise(BaseModel):
    """One recording's windows, summarized."""

    windows: int
    window_s: float
    mean: float = Field(description="mean of the windows (the metric's unit: % of one core)")
    sd: float = Field(description="standard deviation of the windows")
    cv_pct: float = Field(description="noise per window: sd / mean, %")
    lag1: float | None = Field(description="lag-1 autocorrelation of the windows: ~0 when each "
                               "window is on its own, towards 1 when the lab wanders slowly")
    drift_pct_per_min: float | None = Field(description="least-squares slope of the windows "
                                            "against time, % of the mean per minute")


class LabTime(BaseModel):
    """What one candidate's A/B costs besides its windows."""

    window_s: float
    overhead_s: float = Field(0.0, description="seconds each window costs beyond window_s "
                              "(measured on the recording: set-up of each measure call)")
    settle_s: float = Field(0.0, description="seconds after each switch of image")
    switch_s: float | None = Field(None, description="seconds of one switch of image (flash + "
                                   "fingerprint verify); None: not measured, left out of minutes")

    def seconds(self, windows: int, switches: int) -> float:
        return windows * (self.window_s + self.overhead_s) \
            + switches * ((self.switch_s or 0.0) + self.settle_s)


class Case(BaseModel):
    """The rule on simulated A/Bs at one effect."""

    effect_pct: float = Field(description="B's windows lowered by this much (0: A/A)")
    draws: int
    improved_pct: float
    same_pct: float
    unknown_pct: float
    regressed_pct: float
    windows_per_arm: float = Field(description="mean windows of B at the verdict (of each arm "
                                   "when interleaved; A is at the cap otherwise)")
    windows_p90: int
    switches: float = Field(description="mean switches of image per comparison")
    minutes: float = Field(description="mean lab minutes per comparison: windows, their "
                           "overhead, settles and (when measured) switches")

    @property
    def different_pct(self) -> float:
        return self.improved_pct + self.regressed_pct


class Suggestion(BaseModel):
    """A [decision] that reaches the rule's min_effect_pct on this lab, or, when none within the
    bounds tried does, the effect the current one can decide."""

    window_s: float
    max_windows: int
    min_effect_pct: float
    design: Design
    power_pct: float | None = Field(description="share of draws finding min_effect_pct ('improved') "
                                    "with it; None when only min_effect_pct is changed")
    minutes: float | None = Field(description="lab minutes per candidate (the larger of a "
                                  "no-op's and an effect's)")
    basis: str = Field(description="what it was estimated from")
    toml: list[str] = Field(description="the lines to paste into the lab profile")


class Calibration(BaseModel):
    """What the rule can decide on a recording."""

    rule: DecisionRule
    design: Design
    noise: Noise
    lab_time: LabTime
    aa: Case = Field(description="A/A: no effect")
    at_min_effect: Case = Field(description="B lower by min_effect_pct")
    smallest_effect_pct: float | None = Field(description="the smallest effect of EFFECTS_PCT found "
                                              "in >= 90% of draws within the cap; None: not even 50%")
    decidable: bool = Field(description="min_effect_pct is found in >= 90% of draws")
    suggestion: Suggestion | None = None
    distinct_starts: int = Field(description="different comparisons the draws were made of")
    summary: str = Field(description="the above, in words")


class CalibrationRecord(BaseModel):
    """A calibration as stored (records kind "cal"): the windows and every condition they were
    taken under, and what was computed from them."""

    id: str
    started_at: datetime
    build_id: str
    place: str | None = None
    stations: int
    workload: str
    window_s: float
    settle_s: float
    interleave: Interleave = Field(description="[decision] interleave as the profile said it")
    drift_check: bool = False
    switch_s: float | None
    design: Design
    rule: DecisionRule
    values: list[float] = Field(description="the windows (target CPU, % of one core), in order")
    offsets_s: list[float] = Field(description="each window's start, seconds after the first's")
    profile_ids: list[str] = Field(description="the measurements (prof) the windows come from")
    measure_s: float = Field(description="wall seconds of the measuring")
    draws: int
    seed: int
    result: Calibration


def rule_of(decision: DecisionRule, flashes_per_hour: int | None) -> DecisionRule:
    """The pre-registered rule of a profile's [decision] (which adds the measuring settings),
    its rounds settled for the profile's flash budget as an A/B settles them."""
    rule = DecisionRule.model_validate(decision.model_dump(include=set(DecisionRule.model_fields)))
    return rule.resolved(flashes_per_hour)


def design_of(interleave: Interleave, switch_s: float | None, rule: DecisionRule, *,
              window_s: float, settle_s: float) -> Design:
    """The analysis an A/B on this lab gets (core/schedule.py)."""
    on = interleaves(interleave, switch_s, window_s=window_s, step_windows=rule.round_step(),
                     settle_s=settle_s)
    return "blocked" if on else "independent"


def noise(values: Sequence[float], offsets_s: Sequence[float], window_s: float) -> Noise:
    """Mean, noise per window, lag-1 autocorrelation and drift of a recording (offsets_s: each
    window's start in seconds, for the drift)."""
    n = len(values)
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else 0.0
    dev = [v - mean for v in values]
    ss = sum(d * d for d in dev)
    lag1 = sum(dev[i] * dev[i + 1] for i in range(n - 1)) / ss if n > 2 and ss > 0 else None
    drift = None
    if n > 2 and mean and len(offsets_s) == n and len(set(offsets_s)) > 1:
        slope = statistics.linear_regression(list(offsets_s), list(values)).slope
        drift = round(100.0 * slope * 60.0 / mean, 4)
    return Noise(windows=n, window_s=window_s, mean=round(mean, 4), sd=round(sd, 4),
                 cv_pct=round(100.0 * sd / mean, 3) if mean else 0.0,
                 lag1=None if lag1 is None else round(lag1, 4), drift_pct_per_min=drift)


def summed(values: Sequence[float], k: int, phase: int = 0) -> list[float]:
    """The recording as windows k times as long: each the mean of k consecutive windows from
    `phase` on (wrapping around, so every phase gives len // k windows)."""
    n = len(values)
    return [statistics.fmean(values[(phase + k * i + j) % n] for j in range(k)) for i in range(n // k)]


@dataclass(frozen=True)
class _Draw:
    phase: int
    start: int
    a_first: bool


@dataclass(frozen=True)
class _Outcome:
    verdict: str
    windows_b: int
    windows: int
    switches: int


class Simulator:
    """Simulated A/Bs of one rule and design on one recording (or on the recording at k times
    the window length: its k phases). The draws -- where each comparison starts -- are fixed at
    construction: every effect is simulated on the same draws, so power rises with the effect
    as it should."""

    def __init__(self, values: Sequence[float], rule: DecisionRule, design: Design, *,
                 draws: int, seed: int, k: int = 1, drift_check: bool = False) -> None:
        self.rule = rule
        self.design = design
        self.drift_check = drift_check
        self.series = [summed(values, k, p) for p in range(k)] if k > 1 else [list(values)]
        length = len(self.series[0])
        every = [_Draw(p, t, first) for p in range(k) for t in range(length)
                 for first in ((True, False) if design == "blocked" else (True,))]
        rng = random.Random(seed)
        self.distinct = len(every)
        self.draws = rng.sample(every, draws) if draws < len(every) else rng.sample(every, len(every))

    def _one(self, d: _Draw, effect: float) -> _Outcome:
        s = self.series[d.phase]
        pos = d.start

        def take(k: int) -> list[float]:
            nonlocal pos
            out = [s[(pos + i) % len(s)] for i in range(k)]
            pos += k
            return out

        rule, scale = self.rule, 1.0 - effect
        looks = rule.looks()
        if self.design == "blocked":
            a: list[float] = []
            b: list[float] = []
            ra: list[int] = []
            rb: list[int] = []
            r = 0  # rounds as abtest takes them: a look's windows in one, or round_windows each
            for n in looks:
                while len(a) < n:
                    k = min(n - len(a), rule.per_round() or n)
                    first_a = d.a_first == (r % 2 == 0)
                    for arm_a in (first_a, not first_a):
                        if arm_a:
                            a += take(k)
                            ra += [r] * k
                        else:
                            b += [v * scale for v in take(k)]
                            rb += [r] * k
                    r += 1
                j = judge_blocked(a, b, ra, rb, rule)
                if j.decided:
                    return _Outcome(j.verdict, n, 2 * n, r + 1)  # one per round, one to begin
            raise AssertionError("the last look is at the cap")
        a = take(rule.max_windows)
        b = []
        for n in looks:
            b += [v * scale for v in take(n - len(b))]
            j = judge(a, b, rule)
            if j.decided:
                break
        verdict, switches, windows = j.verdict, 2, len(a) + len(b)
        if self.drift_check and verdict != "unknown":  # A again after B (abtest's A-B-A): a
            # lab that moved between the A's makes the verdict unknown
            again = take(rule.min_windows)
            switches, windows = 3, windows + rule.min_windows
            if moved(a, again, rule) is not None:
                verdict = "unknown"
        return _Outcome(verdict, len(b), windows, switches)

    def outcomes(self, effect_pct: float, limit: int | None = None) -> list[_Outcome]:
        return [self._one(d, effect_pct / 100.0) for d in self.draws[:limit]]

    def case(self, effect_pct: float, time: LabTime) -> Case:
        outs = self.outcomes(effect_pct)
        n = len(outs)

        def pct(v: str) -> float:
            return round(100.0 * sum(o.verdict == v for o in outs) / n, 2)

        ws = sorted(o.windows_b for o in outs)
        return Case(effect_pct=effect_pct, draws=n, improved_pct=pct("improved"),
                    same_pct=pct("same"), unknown_pct=pct("unknown"),
                    regressed_pct=pct("regressed"),
                    windows_per_arm=round(statistics.fmean(ws), 2), windows_p90=ws[int(0.9 * (n - 1))],
                    switches=round(statistics.fmean(o.switches for o in outs), 2),
                    minutes=round(statistics.fmean(time.seconds(o.windows, o.switches)
                                                   for o in outs) / 60.0, 2))

    def finds(self, effect_pct: float, *, z: float = 0.0, batch: int = 25) -> bool:
        """Whether the draws say "improved" at this effect in POWER of them -- with `z` standard
        errors to spare (0: the estimate). In batches: it stops once the share is clearly above
        or below POWER (2.6 standard errors), or the draws are spent."""
        hits = done = 0
        p = se = 0.0
        while done < len(self.draws):
            outs = [self._one(d, effect_pct / 100.0) for d in self.draws[done:done + batch]]
            hits += sum(o.verdict == "improved" for o in outs)
            done += len(outs)
            p = hits / done
            se = math.sqrt(max(p * (1 - p), 0.25 / done) / done)
            if abs(p - POWER) > max(2.6, z) * se:
                break
        return p - z * se >= POWER

    def smallest_effect(self) -> float | None:
        """The smallest effect of EFFECTS_PCT found in >= POWER of the draws (bisection: the
        draws are common to every effect); None when not even the largest is."""
        grid = list(EFFECTS_PCT)
        if not self.finds(grid[-1]):
            return None
        lo, hi = -1, len(grid) - 1  # grid[hi] is found; grid[lo] is not (or below the grid)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.finds(grid[mid]):
                hi = mid
            else:
                lo = mid
        return grid[hi]


def _first(n: int, ok: Callable[[int], bool]) -> int | None:
    """The first of the indices 0..n-1 where `ok` holds (False, then True from some index on),
    or None: galloping up from 0, then bisecting -- the cheap small caps are tried first."""
    lo, i, step = -1, 0, 1
    while not ok(i):
        if i == n - 1:
            return None
        lo, i, step = i, min(i + step, n - 1), 2 * step
    hi = i
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _reach(values: Sequence[float], rule: DecisionRule, k: int, *, interleave: Interleave,
           switch_s: float | None, time: LabTime, drift_check: bool, draws: int,
           seed: int) -> Suggestion | None:
    """The smallest cap of CAPS with which windows k times as long surely find min_effect_pct
    (SURE_Z; `_first`), as a suggestion; None when none does."""
    window_s = time.window_s * k
    caps = [c for c in CAPS if c >= rule.min_windows and (k > 1 or c > rule.max_windows)]
    if window_s > 300 or len(values) // k < 4 or not caps:
        return None

    def sim(cap: int, n: int) -> Simulator:
        r = rule.model_copy(update={"max_windows": cap})
        design = design_of(interleave, switch_s, r, window_s=window_s, settle_s=time.settle_s)
        return Simulator(values, r, design, draws=n, seed=seed, k=k, drift_check=drift_check)

    n = min(draws, SEARCH_DRAWS)
    hi = _first(len(caps), lambda i: sim(caps[i], n).finds(rule.min_effect_pct, z=SURE_Z))
    if hi is None:
        return None
    final = sim(caps[hi], n)
    t = time.model_copy(update={"window_s": window_s})
    edge, noop = final.case(rule.min_effect_pct, t), final.case(0.0, t)
    basis = (f"{len(values) // k} windows of {window_s:g} s (the recording's {len(values)} summed "
             f"by {k})" if k > 1 else f"the recording's {len(values)} windows")
    return Suggestion(window_s=window_s, max_windows=caps[hi], min_effect_pct=rule.min_effect_pct,
                      design=final.design, power_pct=edge.improved_pct,
                      minutes=max(edge.minutes, noop.minutes), basis=basis,
                      toml=["[decision]", f"window_s = {window_s:g}", f"max_windows = {caps[hi]}"])


def suggest(values: Sequence[float], rule: DecisionRule, *, interleave: Interleave,
            switch_s: float | None, time: LabTime, drift_check: bool, draws: int, seed: int,
            smallest: float | None) -> Suggestion:
    """The [decision] that surely reaches min_effect_pct (SURE_Z) in the fewest lab
    minutes per candidate (the larger of a no-op's and an effect's), over windows 1x, 2x and 4x
    as long (the recording summed: `_reach`); when none does, min_effect_pct raised to the
    smallest effect the current rule finds (`smallest`; 50% when none)."""
    found = [s for k in LONGER
             if (s := _reach(values, rule, k, interleave=interleave, switch_s=switch_s, time=time,
                             drift_check=drift_check, draws=draws, seed=seed)) is not None]
    best = min(found, key=lambda s: s.minutes or 0.0, default=None)
    if best is not None:
        return best
    effect = smallest if smallest is not None else EFFECTS_PCT[-1]
    design = design_of(interleave, switch_s, rule, window_s=time.window_s, settle_s=time.settle_s)
    return Suggestion(window_s=time.window_s, max_windows=rule.max_windows, min_effect_pct=effect,
                      design=design, power_pct=None, minutes=None,
                      basis=f"no window of up to {LONGER[-1]}x {time.window_s:g} s with max_windows "
                      f"up to {CAPS[-1]} reaches {rule.min_effect_pct:g}%: the effect this rule "
                      "finds instead",
                      toml=["[decision]", f"min_effect_pct = {effect:g}"])


def calibrate(values: Sequence[float], offsets_s: Sequence[float], rule: DecisionRule, *,
              interleave: Interleave, switch_s: float | None, time: LabTime,
              drift_check: bool = False, draws: int = 1000, seed: int = 1) -> Calibration:
    """Everything `calibrate` says about a recording: its noise, the rule's rates on A/A and at
    min_effect_pct in the design the lab gets, the smallest effect it finds, and -- when
    min_effect_pct is not decidable -- the suggested [decision]."""
    design = design_of(interleave, switch_s, rule, window_s=time.window_s, settle_s=time.settle_s)
    sim = Simulator(values, rule, design, draws=draws, seed=seed, drift_check=drift_check)
    aa, edge = sim.case(0.0, time), sim.case(rule.min_effect_pct, time)
    smallest = sim.smallest_effect()
    decidable = edge.improved_pct >= 100 * POWER
    cal = Calibration(rule=rule, design=design, noise=noise(values, offsets_s, time.window_s),
                      lab_time=time, aa=aa, at_min_effect=edge, smallest_effect_pct=smallest,
                      decidable=decidable, distinct_starts=sim.distinct, summary="")
    if not decidable:
        cal.suggestion = suggest(values, rule, interleave=interleave, switch_s=switch_s,
                                 time=time, drift_check=drift_check, draws=draws, seed=seed,
                                 smallest=smallest)
    cal.summary = describe(cal)
    return cal


def describe(cal: Calibration) -> str:
    """The calibration in words: what the current [decision] can decide, and the suggestion."""
    r, nz, aa, edge = cal.rule, cal.noise, cal.aa, cal.at_min_effect
    drift = "" if nz.drift_pct_per_min is None else f", drift {nz.drift_pct_per_min:+.2f}%/min"
    lag = "" if nz.lag1 is None else f", lag-1 autocorrelation {nz.lag1:+.2f}"
    flashes = "" if cal.lab_time.switch_s is not None else " (switches of image not counted: " \
        "none measured yet)"
    k = r.per_round()
    rounds = "pairs" if k == 1 else "rounds of a look's windows" if k is None else \
        f"rounds of {k} windows per arm"
    design = f"interleaved in {rounds}, blocked by round" if cal.design == "blocked" else \
        "A in one block at the cap, B after it"
    smallest = f"{cal.smallest_effect_pct:g}%" if cal.smallest_effect_pct is not None else "over 50%"
    lines = [
        f"noise {nz.cv_pct:.2f}% per {nz.window_s:g} s window ({nz.windows} windows, mean "
        f"{nz.mean:.3g}){lag}{drift}.",
        f"With [decision] as it is ({design}): finds a {r.min_effect_pct:g}% effect in "
        f"{edge.improved_pct:.0f}% of draws within {r.max_windows} windows (mean "
        f"{edge.windows_per_arm:.1f} per arm); a no-op is 'same' in {aa.same_pct:.0f}% "
        f"(false 'different' {aa.different_pct:.1f}%, unknown {aa.unknown_pct:.0f}%); "
        f"~{aa.minutes:.1f} lab minutes per no-op candidate, ~{edge.minutes:.1f} at "
        f"{r.min_effect_pct:g}%{flashes}. Smallest effect found in >= {100 * POWER:.0f}%: "
        f"{smallest}.",
    ]
    if cal.decidable:
        lines.append(f"min_effect_pct = {r.min_effect_pct:g} is decidable on this lab.")
    elif cal.suggestion is not None:
        s = cal.suggestion
        if s.power_pct is not None:
            lines.append(f"min_effect_pct = {r.min_effect_pct:g} is NOT decidable "
                         f"({edge.improved_pct:.0f}% < {100 * POWER:.0f}%). Suggested: window_s = "
                         f"{s.window_s:g}, max_windows = {s.max_windows} (finds it in "
                         f"{s.power_pct:.0f}%, ~{s.minutes:.1f} lab minutes per candidate; from "
                         f"{s.basis}; calibrate again with it to confirm).")
        else:
            lines.append(f"min_effect_pct = {r.min_effect_pct:g} is NOT decidable "
                         f"({edge.improved_pct:.0f}% < {100 * POWER:.0f}%), and {s.basis}: "
                         f"min_effect_pct = {s.min_effect_pct:g}.")
    return " ".join(lines)


def fits(rec: CalibrationRecord, *, build_id: str, place: str | None, stations: int,
         rule: DecisionRule, window_s: float, settle_s: float, design: Design,
         drift_check: bool) -> str | None:
    """Why a stored calibration does not speak for these settings (None: it does)."""
    for name, have, want in (("build", rec.build_id, build_id), ("place", rec.place, place),
                             ("workload point", rec.stations, stations),
                             ("window_s", rec.window_s, window_s), ("settle_s", rec.settle_s, settle_s),
                             ("design", rec.design, design), ("drift_check", rec.drift_check, drift_check)):
        if have != want:
            return f"{name} {have} there, {want} now"
    if rec.rule != rule:
        changed = [f for f in DecisionRule.model_fields if getattr(rec.rule, f) != getattr(rule, f)]
        return "the rule changed (" + ", ".join(changed) + ")"
    return None
