"""What `experiment` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.core.decision import Verdict
from labwarden.core.experiments import Decision


class ExperimentOutput(BaseModel):
    experiment_id: str
    patch: str
    decision: Decision
    reason: str
    verdict: Verdict | None = Field(description="the decision rule at the densest point")
    stations: int | None = Field(description="the workload point screened (clients, streams; 0 "
                                 "on a DUT without a load)")
    mean_a: float | None = Field(description="metric of A at the densest point (CPU %)")
    mean_b: float | None
    delta_pct: float | None
    ci_pct: tuple[float, float] | None = Field(description="confidence interval of delta_pct "
                                               "(1 - alpha per look): 'improved' or 'regressed' "
                                               "when it excludes 0")
    equivalence_pct: tuple[float, float] | None = Field(description="equivalence interval of "
                                                        "delta_pct (1 - 2 beta per look): 'same' "
                                                        "when it lies inside +-min_effect_pct")
    windows: tuple[int, int] | None = Field(description="windows of A and B the rule needed")
    offered_load: str | None = Field(description="the offered-load gate's evidence")
    gates_failed: list[str]
    gates_not_applicable: list[str] = Field(default_factory=list, description="gates whose "
                                            "evidence this lab cannot give: they neither pass "
                                            "nor block a keep (the reason is in the record)")
    build_a: str | None
    build_b: str | None
    sweep_a: str | None
    sweep_b: str | None
    cost_usd: float
    lab_seconds: float
    left_flashed: str | None = Field(None, description="the build the board is left running "
                                     "(verified): B when kept, else A -- the base")
    left_flashed_why: str | None = Field(None, description="why, and where each board it used "
                                         "was left (a fleet)")
    design: str | None = Field(None, description="how A and B were scheduled (interleaved rounds "
                               "or blocks with A again after B) and why, what of A was reused, "
                               "and what the environment rule left out")
