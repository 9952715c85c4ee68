"""Experiments and bisections as records (kinds "exp" and "bis" in core/records.py): what was
tried, on which base, what the decision rule saw at each look, which gates held, what was
decided and why, and what it cost. The morning report's ledger is a list of these.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, Field, model_validator

from labwarden.core.decision import Judgement

Decision = Literal["kept", "dropped", "refuted", "failed"]
"""kept: improved at the densest point, no gate failed, offered load not lower; refuted: the
rule decided "same" (the patch does not do what it was for -- seed 000's 0905); dropped:
regressed, undecided at the cap, or a gate failed; failed: it could not be judged (build,
flash, verification or a measurement failed)."""


class WindowEnv(BaseModel):
    """What else ran on the DUT during one window (from the window's kernel split): the
    environment the decision rule's `environment_shift_pp` compares between A and B."""

    others_pct: float | None = Field(description="the DUT's user + system + steal time of all "
                              "cores minus the target's, % of one core (a CPU hog reads ~100; "
                              "irq and softirq are left out: a patch moves them; nice time too: "
                              "niced work fills what the target leaves idle, so it moves with "
                              "the patch -- a target that itself runs niced reads low by its "
                              "own CPU; None: the kernel split was not read)")
    steal_pct: float = Field(0.0, description="all cores' steal, % of one core")
    wait_pct: float | None = Field(None, description="the target waited this long on a run queue "
                                   "for a CPU, % of one core (None: not read): a starved target "
                                   "does less work whatever the patch")


class Arm(BaseModel):
    """One side of an A/B at one density: its windows, in the order measured."""

    build_id: str
    values: list[float] = Field(default_factory=list, description="the metric per window")
    load: list[float] = Field(default_factory=list, description="offered-load counter per window "
                              "(calls/s); empty when not measured")
    profile_ids: list[str] = Field(default_factory=list)
    window_seconds: float = Field(0.0, description="sum of the windows' durations")
    rounds: list[int] = Field(default_factory=list, description="the round of each window "
                              "(interleaved: A and B of one round are next to each other in "
                              "time); empty in records older than the field")
    env: list[WindowEnv | None] = Field(default_factory=list, description="what else ran on the "
                                        "DUT in each window (None: the DUT's kernel split was "
                                        "not read)")
    left_out: list[int] = Field(default_factory=list, description="windows (indices into "
                                "values) the environment rule left out of the verdict")


Design = Literal["interleaved", "blocks"]
"""interleaved: A and B in alternating rounds, analysed blocked by round; blocks: A in one block
at the cap, B adding windows after it, A measured again after B (A-B-A)."""


class Screening(BaseModel):
    """The adaptive A/B at the densest point."""

    stations: int
    workload: str | None = Field(None, description="the point in the lab's words: '114 clients', "
                                 "'its own workload (no load axis)'")
    window_s: float
    metric: str = Field(description="'cpu' (target CPU %) or an uprobe counter name")
    a: Arm
    b: Arm
    looks: list[Judgement] = Field(description="the rule at each look, in order")
    flashes: int = Field(0, description="flashes the interleaving cost")
    seconds: float = Field(0.0, description="wall time of the screening")
    design: Design | None = Field(None, description="how A and B were scheduled (None: a record "
                                  "older than the field)")
    switch_s: float | None = Field(None, description="the measured seconds of one switch of "
                                   "image (flash + fingerprint verify) the design was chosen on")
    design_why: str | None = Field(None, description="why this design, in words")
    a_again: Arm | None = Field(None, description="blocks: A measured again after B (A-B-A); a "
                                "lab that moved between the A's makes the verdict unknown")
    environment: list[str] = Field(default_factory=list, description="what the environment rule "
                                   "saw and did (windows or rounds left out, or flagged), in words")
    a_reused_from: str | None = Field(None, description="the record whose windows of A this "
                                      "screening reused (an experiment id, or 'bisect' for a "
                                      "step's)")
    a_reuse: str | None = Field(None, description="what was reused of A, and the check window's "
                                "verdict -- or why A was measured anew")

    @property
    def final(self) -> Judgement:
        return self.looks[-1]

    def describe_design(self) -> str:
        """How A and B were scheduled and what the drift defences did, in one line."""
        if self.design is None:
            return ""
        parts = [f"{self.design} ({self.design_why})" if self.design_why else self.design]
        if self.a_reuse:
            parts.append(self.a_reuse)
        if self.a_again is not None:
            parts.append(f"A again after B: {len(self.a_again.values)} window(s)")
        parts += self.environment[:3]
        if len(self.environment) > 3:
            parts.append(f"{len(self.environment) - 3} more environment note(s)")
        return "; ".join(parts)


GateStatus = Literal["passed", "failed", "not_applicable"]
"""One status everywhere (gate_check, experiment, sweep, report, summary): not_applicable means
the lab cannot give the gate's evidence (the reason is the evidence); it never blocks a keep
and never shows as failed."""


class Gate(BaseModel):
    """One gate's verdict with its evidence (gate_check's CheckedGate narrows its name)."""

    name: str
    passed: bool = Field(description="status == passed (a gate that is not applicable has not "
                         "passed: it was not evaluated)")
    # None is a placeholder, never kept: _status fills it from `passed` before validation
    status: GateStatus = Field(None, validate_default=False,  # type: ignore[call-overload]
                               description="passed | failed | not_applicable (records written "
                               "before it existed: from `passed`)")
    evidence: str = Field(description="the numbers the verdict rests on, or why not applicable")

    @model_validator(mode="before")
    @classmethod
    def _status(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("status") is None:
            data = {**data, "status": "passed" if data.get("passed") else "failed"}
        return data

    @classmethod
    def judged(cls, name: str, passed: bool, evidence: str) -> Self:
        return cls(name=name, passed=passed, status="passed" if passed else "failed",
                   evidence=evidence)

    @classmethod
    def not_applicable(cls, name: str, why: str) -> Self:
        return cls(name=name, passed=False, status="not_applicable", evidence=f"n/a: {why}")

    @property
    def failed(self) -> bool:
        return self.status == "failed"


class DensityDelta(BaseModel):
    stations: int
    a_mean: float
    b_mean: float
    delta_pct: float
    p_value: float | None


class FunctionDelta(BaseModel):
    """One function's change in the differential flame graph (lab/host/folded.Delta, stored)."""

    symbol: str
    base_pct: float
    new_pct: float
    delta_pp: float
    base_cpu_pp: float | None = None
    new_cpu_pp: float | None = None
    delta_cpu_pp: float | None = None


class FlameRef(BaseModel):
    """A kept candidate's differential flame graph (symbolize of B at the densest point against
    A): where its SVGs are and what it rests on -- or, with only `error`, why there is none."""

    profile_id: str | None = None
    baseline_profile_id: str | None = None
    key: str | None = None
    svg: str | None = None
    diff_svg: str | None = None
    baseline_svg: str | None = None
    stations: int | None = None
    samples: int | None = None
    unknown_pct: float | None = None
    error: str | None = None


class Cost(BaseModel):
    model_calls: int = Field(0, description="model calls since the previous experiment of the session")
    tokens: int = 0
    usd: float = 0.0
    lab_seconds: float = Field(0.0, description="wall time of the experiment call")
    window_seconds: float = Field(0.0, description="of which measurement windows")


class PowerCycle(BaseModel):
    """The place power-cycled before a one-place reproduction -- or why it could not be."""

    done: bool = Field(description="the DUT was power-cycled and came back")
    how: str = Field(description="what was done (the power driver's words), or why no power "
                     "cycle was possible or it failed")
    seconds: float | None = Field(None, description="until the target ran again")
    verified: str | None = Field(None, description="the build fingerprint-verified after it")


class Reproduction(BaseModel):
    """A candidate decided "improved" screened again before it is kept: on another place of the
    fleet (A and B both there), or on the same place when it is the only good one -- after a
    power cycle of that place where its kind allows one."""

    place: str | None = Field(description="where it was screened again")
    same_place: bool = Field(False, description="the fleet had no other good place")
    power_cycle: PowerCycle | None = Field(None, description="on the same place: the power cycle "
                                           "before the second screening, or why there was none")
    build_a: str | None = Field(None, description="A built for that place (a vlab's paths differ)")
    build_b: str | None = None
    screening: Screening | None = Field(None, description="the second screening (None: it "
                                        "could not run -- `error` says why)")
    reproduced: bool = False
    survivor_here: bool = Field(False, description="the survivor's full sweeps, compare and gates "
                                "ran on this place: it held a sweep of A, the first place did not")
    error: str | None = None

    def describe(self) -> str:
        cycle = self.power_cycle
        after = "" if cycle is None else (" after a power cycle" if cycle.done
                                          else f" without a power cycle ({cycle.how})")
        if self.screening is None or not self.screening.looks:
            return f"no second screening on {self.place}{after}: {self.error or 'not run'}"
        swept = ", full sweeps and gates there" if self.survivor_here else ""
        return f"on {self.place}{after}: {self.screening.final.describe()}{swept}"


class Experiment(BaseModel):
    id: str
    patch: str = Field(description="the candidate's patch id")
    patch_name: str | None = None
    author: str | None = Field(None, description="session that submitted the patch")
    ref: str
    base_patches: list[str] = Field(default_factory=list)
    build_a: str | None = None
    build_b: str | None = None
    session_id: str | None = None
    started_at: datetime
    ended_at: datetime | None = None
    parity_a: str | None = Field(None, description="the declared parity check's output on A")
    parity_b: str | None = None
    screening: Screening | None = None
    sweep_a: str | None = None
    sweep_b: str | None = None
    deltas: list[DensityDelta] = Field(default_factory=list, description="full sweeps, per density")
    gates: list[Gate] = Field(default_factory=list)
    flame: FlameRef | None = Field(
        None, description="symbolize of B at the densest point against A: svg paths and key")
    flame_deltas: list[FunctionDelta] = Field(
        default_factory=list, description="the functions that moved most, B against A: absolute "
        "CPU (pp of one core) beside share of the samples")
    decision: Decision
    reason: str
    cost: Cost = Field(default_factory=Cost)
    place: str | None = Field(None, description="the fleet place both arms ran on (None off a fleet)")
    reproduction: Reproduction | None = Field(
        None, description="the second screening of a candidate the first decided improved (fleet)")
    left_flashed: str | None = Field(None, description="the build the board was left verified on "
                                     "at the end: B when kept, else A (the base)")
    left_why: list[str] = Field(default_factory=list, description="where each board it used was "
                                "left, and why (a fleet: its place handed back, the reproducing one)")

    @property
    def verdict(self) -> str | None:
        return self.screening.final.verdict if self.screening and self.screening.looks else None


class BisectStep(BaseModel):
    commit: str
    subject: str
    against: str = Field(description="'good' or 'bad': the end it was compared with")
    judgement: Judgement
    side: Literal["good", "bad", "unknown"]
    a_reuse: str | None = Field(None, description="what this step reused of its A (good's "
                                "windows from an earlier step), or why not")


class Bisection(BaseModel):
    id: str
    good: str
    bad: str
    metric: str
    stations: int
    commits: list[str] = Field(description="good (exclusive) .. bad (inclusive), oldest first")
    ends: Judgement | None = Field(None, description="bad against good: the regression chased")
    steps: list[BisectStep] = Field(default_factory=list)
    first_bad: str | None = None
    first_bad_subject: str | None = None
    places: list[str] = Field(default_factory=list, description="the fleet places the range was "
                              "split over (empty off a fleet)")
    outcome: Literal["found", "no_regression", "undecided", "failed"]
    reason: str
    left_flashed: str | None = Field(None, description="the build the board was left verified on "
                                     "at the end: good's (the base)")
    left_why: list[str] = Field(default_factory=list)
    started_at: datetime
    seconds: float = 0.0
