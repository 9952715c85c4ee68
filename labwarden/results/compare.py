"""What `compare` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.core.decision import Verdict


class PointDelta(BaseModel):
    """A and B at one workload point of the two sweeps."""

    stations: int
    baseline_mean: float
    candidate_mean: float
    delta_pp: float = Field(description="candidate - baseline, percentage points of one core")
    delta_pct: float = Field(description="relative change, % of the baseline")
    p_value: float | None = Field(description="Welch's t-test, two-sided (None with < 2 reps)")
    ci95_pp: tuple[float, float] | None = Field(description="95% CI of the difference (Welch)")
    ci95_pct: tuple[float, float] | None = Field(None, description="95% CI of delta_pct, on the "
                                                 "log ratio (never below -100%)")
    verdict: Verdict


class CompareOutput(BaseModel):
    baseline: str
    candidate: str
    baseline_build: str | None
    candidate_build: str | None
    deltas: list[PointDelta]
    verdict: Verdict = Field(description="at the densest common point")
