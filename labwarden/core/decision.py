"""The decision rule of an A/B comparison, Pinpoint-style: three-valued and adaptive.

Pinpoint (catapult's dashboard/pinpoint/models/compare) answers "different", "same" or "unknown"
for two samples: different when the p-value is below a low threshold, same when it is above a
high threshold (a real difference of the size worth finding would very likely have shown by
now), unknown in between -- and on "unknown" it runs more repeats. Ours does the same with two
intervals of the relative change (Welch), one per answer:

- **different** ("improved" / "regressed"): the confidence interval excludes 0 (and the answer
  is not "same");
- **same**: the equivalence interval lies inside that band -- an effect worth keeping is
  excluded (two one-sided tests, TOST);
- **unknown**: neither yet; the caller adds windows (`step_windows` per arm) up to
  `max_windows`, and an "unknown" at the cap stays unknown (never kept).

The two answers spend two error budgets, as Pinpoint's low and high thresholds do:
- `alpha` bounds a false "different": the interval that may say "improved" is wide;
- `beta` bounds a false "same", i.e. an effect of exactly `min_effect_pct` called "same": the
  equivalence interval is narrower, since missing an effect at the edge of "worth keeping"
  costs less than keeping a change that does nothing.
With one budget for both (the first version), a no-op on the vlab's ~2.3 %-per-window noise was
still "unknown" at 11 windows in about one comparison in seven (resampling the vlab's own A/B
windows), so an overnight loop could not decide its no-ops.

The intervals are computed on the log of the ratio B/A (Welch, the delta method for each mean's
log) and reported back as % change: a CPU share cannot fall by more than 100%, and an interval
on the raw difference divided by A's mean can say it did ([-106, -60]% for a large cut of a
noisy A); exp() of a log interval stays above -100%, and is not symmetric around the change.
Where a mean is not positive (a counter that stays at 0) the raw difference is used.

The rule looks at the data several times (at `min_windows`, then every `step_windows`), so each
budget is split over the planned looks (Bonferroni): each look uses alpha / looks and
beta / looks. A false "improved" then has probability at most alpha / 2 over the whole adaptive
comparison, a false "same" at most beta (bench/decision.py measures both). Parameters are
pre-registered in the lab profile's `[decision]` section: nobody picks them after seeing the
data of the change under test (bench/decision.py measures the lab's own noise to size them).
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from scipy.stats import rv_continuous

Verdict = Literal["improved", "regressed", "same", "unknown"]
Design = Literal["independent", "blocked"]
"""How the windows are analysed: `independent` -- two samples (Welch), for A measured in one
block and B in another; `blocked` -- the windows of A and B taken in rounds (interleaved), a
round's A and B next to each other in time: the effect is estimated within rounds (a linear
model with one level per round), so a background that moves between rounds cancels."""


class DecisionRule(BaseModel):
    """The pre-registered rule: what an A/B comparison needs before it may say anything."""

    model_config = ConfigDict(extra="forbid")

    alpha: float = Field(0.02, gt=0, lt=0.5, examples=[0.02], description="error budget of a "
                         "'different' verdict over the whole adaptive comparison (two-sided); "
                         "split over the planned looks. A false 'improved' is at most alpha/2")
    beta: float = Field(0.1, gt=0, lt=0.5, examples=[0.1], description="error budget of a 'same' "
                        "verdict: how often an effect of exactly min_effect_pct may be called "
                        "'same' over the whole comparison; split over the planned looks")
    min_effect_pct: float = Field(5.0, gt=0, le=100, examples=[5.0], description="the smallest "
                                  "effect worth keeping, % of A's mean: a change surely smaller "
                                  "than this is 'same'")
    min_windows: int = Field(3, ge=2, le=100, examples=[3], description="windows per arm before "
                             "the first look")
    step_windows: int = Field(2, ge=1, le=100, examples=[2], description="windows added per arm "
                              "while the verdict is 'unknown'")
    max_windows: int = Field(15, ge=2, le=200, examples=[15], description="windows per arm at "
                             "most: an 'unknown' here stays unknown")
    round_windows: Annotated[int, Field(ge=1, le=100)] | Literal["auto", "look"] = Field(
        "look", examples=["auto"], description="interleaved: windows per arm in one round (A's "
        "then B's, a switch of image between them). 1: pairs -- every window of B beside one of "
        "A, the rule's interval from the spread of the pairs' differences, so windows that "
        "follow each other alike (a background that lasts longer than a window, a restart's "
        "level) cannot narrow it; each pair costs a switch. look: a round adds a look's windows "
        "(min_windows, then step_windows), one switch per look. auto: pairs where flashes are "
        "free of a budget (no [policy.budgets] flashes_per_hour: a vlab) or the budget holds "
        "one A/B at the cap (max_windows + 1 flashes an hour), else look. look is the default "
        "for now: on the vlab's drift bench pairs called no no-op different where look rounds "
        "called 3 of 20, but they cost more lab time per A/B")

    @model_validator(mode="after")
    def _schedule(self) -> DecisionRule:
        if self.max_windows < self.min_windows:
            raise ValueError(f"max_windows ({self.max_windows}) must be >= min_windows "
                             f"({self.min_windows})")
        return self

    def looks(self) -> list[int]:
        """Windows per arm at each planned look: min, min+step, ... up to max (max included)."""
        out = list(range(self.min_windows, self.max_windows + 1, self.step_windows))
        if out[-1] != self.max_windows:
            out.append(self.max_windows)
        return out

    def resolved(self, flashes_per_hour: int | None) -> Self:
        """This rule with `round_windows` "auto" settled for a lab whose flash budget is
        `flashes_per_hour` (None: no budget): pairs when the hour holds one A/B at the cap (a
        switch per pair, one to begin), else a look's windows per round. The budget is the
        profile's, not what is left of it this hour: the design is fixed before any window."""
        if self.round_windows != "auto":
            return self
        fits = flashes_per_hour is None or flashes_per_hour >= self.max_windows + 1
        return self.model_copy(update={"round_windows": 1 if fits else "look"})

    def per_round(self) -> int | None:
        """Windows per arm in one interleaved round; None: a look's (round_windows "look").
        "auto" not yet settled (`resolved`) reads as pairs, as on a lab without a flash budget."""
        if self.round_windows == "look":
            return None
        return 1 if self.round_windows == "auto" else self.round_windows

    def round_step(self) -> int:
        """Windows per arm a round of the interleaved design adds after the first look's."""
        return self.per_round() or self.step_windows

    def alpha_per_look(self) -> float:
        return self.alpha / len(self.looks())

    def beta_per_look(self) -> float:
        return self.beta / len(self.looks())


class Judgement(BaseModel):
    """One look of the rule at two samples."""

    verdict: Verdict
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    delta_pct: float = Field(description="(B - A) / A, %")
    ci_pct: tuple[float, float] | None = Field(description="confidence interval of delta_pct at "
                                               "1 - alpha_look (Welch): 'different' when it "
                                               "excludes 0")
    same_ci_pct: tuple[float, float] | None = Field(None, description="equivalence interval of "
                                                    "delta_pct at 1 - 2 beta_look (TOST): 'same' "
                                                    "when it lies inside the band")
    p_value: float | None = Field(description="Welch's t-test (design independent) or the "
                                  "blocked model's t-test, two-sided")
    alpha_look: float
    beta_look: float | None = None
    margin_pct: float = Field(description="the equivalence band: +-margin_pct is 'same'")
    decided: bool = Field(description="the verdict is final (not unknown), or the cap is reached")
    design: Design = Field("independent", description="how the windows were analysed: two "
                           "independent samples (Welch) or blocked by round (interleaved A/B; "
                           "records older than the field: independent)")
    dof: float | None = Field(None, description="degrees of freedom of the interval")
    note: str | None = Field(None, description="why a verdict was overridden (e.g. 'unknown: the "
                             "lab moved' when A measured again after B disagrees with A)")

    def rests_on_equivalence(self) -> bool:
        """A 'same' verdict rests on the equivalence interval; every other on the CI."""
        return self.verdict == "same" and self.same_ci_pct is not None

    def deciding_interval(self) -> tuple[float, float] | None:
        """The interval the verdict rests on: the equivalence interval for 'same', else the CI."""
        return self.same_ci_pct if self.rests_on_equivalence() else self.ci_pct

    def interval_text(self) -> str:
        iv = self.deciding_interval()
        if iv is None:
            return "CI n/a"
        name = "equivalence" if self.rests_on_equivalence() else "CI"
        return f"{name} [{iv[0]:+.1f}, {iv[1]:+.1f}]%"

    def describe(self) -> str:
        ci = f"[{self.ci_pct[0]:+.1f}, {self.ci_pct[1]:+.1f}]%" if self.ci_pct else "n/a"
        eq = ""
        if self.same_ci_pct and self.beta_look is not None:
            eq = (f", equivalence [{self.same_ci_pct[0]:+.1f}, {self.same_ci_pct[1]:+.1f}]% at "
                  f"{1 - 2 * self.beta_look:.4g}")
        note = f" -- {self.note}" if self.note else ""
        blocked = ", blocked by round" if self.design == "blocked" else ""
        return (f"{self.verdict}: {self.mean_a:.3g} -> {self.mean_b:.3g} ({self.delta_pct:+.1f}%, "
                f"CI {ci} at {1 - self.alpha_look:.4g}{eq}, n={self.n_a}+{self.n_b}, band "
                f"+-{self.margin_pct:g}%{blocked}){note}")


def _t() -> rv_continuous:
    """scipy's Student t, imported when a look is judged: at import, scipy (~0.8 s) would be
    paid by every command that reads a lab profile."""
    from scipy import stats

    return stats.t


def _log_ratio(a: list[float], b: list[float]) -> tuple[float, float, float] | None:
    """log(mean B / mean A), its standard error (each mean's log by the delta method: var/mean^2)
    and Welch's degrees of freedom; None when a mean is not positive or a side has < 2 values."""
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    if ma <= 0 or mb <= 0:
        return None
    va = statistics.variance(a) / len(a) / ma**2
    vb = statistics.variance(b) / len(b) / mb**2
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else math.inf
    return math.log(mb / ma), se, dof


def pct_interval(a: list[float], b: list[float], confidence: float) -> tuple[float, float] | None:
    """The two-sided `confidence` interval of B's change from A in % (on the log ratio: never
    below -100%); None when it cannot be computed (a side with < 2 values, a mean <= 0)."""
    lr = _log_ratio(a, b)
    if lr is None:
        return None
    log, se, dof = lr
    half = float(_t().ppf(0.5 + confidence / 2, dof)) * se if se > 0 else 0.0
    return 100.0 * math.expm1(log - half), 100.0 * math.expm1(log + half)


class _Estimate(BaseModel):
    """B's effect on A with its standard error, on the log ratio (`log`) or on the raw
    difference scaled by A's mean (a counter that can be 0)."""

    value: float
    se: float
    dof: float
    log: bool
    scale: float = 1.0


def _welch(a: list[float], b: list[float]) -> _Estimate | None:
    lr = _log_ratio(a, b)
    if lr is not None:
        return _Estimate(value=lr[0], se=lr[1], dof=lr[2], log=True)
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else math.inf
    return _Estimate(value=mb - ma, se=se, dof=dof, log=False, scale=abs(ma) if ma else 1.0)


def _blocked(a: list[float], b: list[float], rounds_a: list[int],
             rounds_b: list[int]) -> _Estimate | None:
    """B's effect in the linear model `value = round + arm` fitted by least squares: the effect is
    estimated from A and B inside each round, so a level that moves between rounds (the
    background, a drifting clock) cancels. On the log of the values when all are positive,
    else on the values. Rounds holding one arm only are left out (they say nothing about the
    effect); None when no round holds both arms or no degree of freedom is left.
    Written here, not with statsmodels: one two-factor OLS is a few lines of numpy, and
    statsmodels is not a dependency."""
    import numpy as np

    both = sorted(set(rounds_a) & set(rounds_b))
    pts = [(v, r, 0) for v, r in zip(a, rounds_a, strict=True) if r in both] \
        + [(v, r, 1) for v, r in zip(b, rounds_b, strict=True) if r in both]
    dof = len(pts) - len(both) - 1
    if not both or dof < 1:
        return None
    log = all(v > 0 for v, _, _ in pts)
    y = np.array([math.log(v) if log else v for v, _, _ in pts])
    x = np.zeros((len(pts), len(both) + 1))
    for i, (_, r, arm) in enumerate(pts):
        x[i, both.index(r)] = 1.0
        x[i, -1] = arm
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    s2 = float(resid @ resid) / dof
    se = math.sqrt(max(s2 * float(np.linalg.inv(x.T @ x)[-1, -1]), 0.0))
    ma = statistics.fmean(v for v, _, arm in pts if arm == 0)
    return _Estimate(value=float(coef[-1]), se=se, dof=dof, log=log,
                     scale=abs(ma) if ma else 1.0)


def _conclude(est: _Estimate | None, a: list[float], b: list[float], rule: DecisionRule, *,
              higher_is_worse: bool, margin_pct: float | None, design: Design) -> Judgement:
    alpha, beta = rule.alpha_per_look(), rule.beta_per_look()
    margin = max(rule.min_effect_pct, margin_pct or 0.0)
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    scale = abs(ma) if ma else 1.0
    pct = 100.0 * (mb - ma) / scale
    p: float | None = None
    ci: tuple[float, float] | None = None
    eq: tuple[float, float] | None = None
    if est is not None:
        if est.se == 0:  # identical windows on each side (a counter that does not move)
            p, half, half_eq = (0.0 if est.value else 1.0), 0.0, 0.0
        else:
            t = _t()
            p = float(2 * t.sf(abs(est.value) / est.se, est.dof))
            half = float(t.ppf(1 - alpha / 2, est.dof)) * est.se
            # TOST: B - A > -margin and B - A < +margin, each one-sided at beta_look
            half_eq = float(t.ppf(1 - beta, est.dof)) * est.se

        def pct_of(x: float) -> float:  # the log ratio stays inside what a share can do
            return 100.0 * math.expm1(x) if est.log else 100.0 * x / est.scale

        ci = (pct_of(est.value - half), pct_of(est.value + half))
        eq = (pct_of(est.value - half_eq), pct_of(est.value + half_eq))
        if design == "blocked":  # the model's estimate, not the raw means' (drift removed)
            pct = pct_of(est.value)
    verdict: Verdict = "unknown"
    if ci is not None and eq is not None:
        if -margin < eq[0] and eq[1] < margin:
            verdict = "same"
        elif ci[0] > 0 or ci[1] < 0:
            worse = (ci[0] > 0) == higher_is_worse
            verdict = "regressed" if worse else "improved"
    # the cap is on the arm that grows: both when interleaved, B when A was measured once at it
    capped = min(len(a), len(b)) >= rule.max_windows
    return Judgement(verdict=verdict, n_a=len(a), n_b=len(b), mean_a=round(ma, 4),
                     mean_b=round(mb, 4), delta_pct=round(pct, 3),
                     ci_pct=(round(ci[0], 3), round(ci[1], 3)) if ci else None,
                     same_ci_pct=(round(eq[0], 3), round(eq[1], 3)) if eq else None,
                     p_value=None if p is None else round(p, 6), alpha_look=alpha, beta_look=beta,
                     margin_pct=margin, decided=verdict != "unknown" or capped, design=design,
                     dof=None if est is None or math.isinf(est.dof) else round(est.dof, 2))


def judge(a: list[float], b: list[float], rule: DecisionRule, *, higher_is_worse: bool = True,
          margin_pct: float | None = None) -> Judgement:
    """Look once at A's and B's windows as two independent samples (Welch). `margin_pct` widens
    the band of 'same' (bisect uses half the regression it chases); the default is the rule's
    min_effect_pct. `decided` says whether the caller may stop: a verdict other than unknown, or
    no planned look left."""
    return _conclude(_welch(a, b), a, b, rule, higher_is_worse=higher_is_worse,
                     margin_pct=margin_pct, design="independent")


def judge_blocked(a: list[float], b: list[float], rounds_a: list[int], rounds_b: list[int],
                  rule: DecisionRule, *, higher_is_worse: bool = True,
                  margin_pct: float | None = None) -> Judgement:
    """Look once at windows taken in rounds (interleaved): `rounds_a[i]` is the round of `a[i]`.
    The interval comes from the blocked model (_blocked): within-round differences, not two
    independent samples. Everything else as `judge`."""
    return _conclude(_blocked(a, b, rounds_a, rounds_b), a, b, rule,
                     higher_is_worse=higher_is_worse, margin_pct=margin_pct, design="blocked")


def moved(before: list[float], now: list[float], rule: DecisionRule, *,
          margin_pct: float | None = None) -> Judgement | None:
    """Two measurements of one build disagree -- the rule's interval excludes 0 and the change is
    beyond the band: the lab moved between them (A-B-A, a reused A's check). None: they agree."""
    j = judge(before, now, rule, margin_pct=margin_pct)
    return j if j.verdict in ("improved", "regressed") and abs(j.delta_pct) > j.margin_pct else None


def spare_windows(rule: DecisionRule) -> int:
    """Windows an arm may take beyond the cap to replace those a pre-registered environment rule
    left out: half the cap (the cap counts kept windows; this bounds the lab time)."""
    return rule.max_windows // 2


def next_windows(n: int, rule: DecisionRule) -> int:
    """Windows per arm at the look after one with `n` per arm (never past the cap)."""
    for k in rule.looks():
        if k > n:
            return k
    return rule.max_windows
