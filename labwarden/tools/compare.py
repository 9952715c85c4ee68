"""compare: A/B of two sweeps -- per density the delta in pp and %, Welch's t-test over the
reps, and a verdict in the experiment's words: improved / regressed / same / unknown.

Read-only (records on the host). Refuses to compare sweeps whose checked conditions differ
(governor, boost, CLK_TCK, topology, host, target): the build is the only thing allowed to change.
"""

from __future__ import annotations

import math
import statistics

from pydantic import Field
from scipy import stats

from labwarden.core.conditions import WindowConditions
from labwarden.core.decision import Verdict, pct_interval
from labwarden.core.errors import ToolError
from labwarden.core.measurements import MeasurementRecord, SweepRecord
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.results.compare import CompareOutput, PointDelta
from labwarden.tools.context import LabContext


class CompareInput(ToolInput):
    baseline: str = Field(description="sweep id of A", examples=["swp-1a2b3c4d5e6f"])
    candidate: str = Field(description="sweep id of B")
    alpha: float = Field(0.05, gt=0, lt=0.5, description="significance level of Welch's t-test")
    min_effect_pct: float = Field(3.0, ge=0, le=100, description="smallest change that matters; "
                                  "a smaller one is 'same' (an equivalence margin)")


def welch_delta(a: list[float], b: list[float], alpha: float, min_effect_pct: float) -> PointDelta:
    """Welch's test of two sweeps' reps at one point, with `min_effect_pct` as the equivalence
    margin. A fixed-n comparison of two finished sweeps; an experiment's adaptive A/B decides by
    its pre-registered rule instead (core/decision.judge), in the same words."""
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    delta = mb - ma
    pct = 100.0 * delta / ma if ma else math.inf
    p = ci = None
    if len(a) > 1 and len(b) > 1:
        va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
        se = math.sqrt(va + vb)
        if se == 0:
            p = 0.0 if delta else 1.0
            ci = (delta, delta)
        else:
            # Welch's t-test from the moments above (what ttest_ind(equal_var=False) computes;
            # it warns of precision loss when a group's reps repeat exactly, as tick-quantised
            # CPU% often does, though the test itself stays sound)
            dof = (va + vb) ** 2 / ((va**2 / (len(a) - 1)) + (vb**2 / (len(b) - 1)))
            p = float(2 * stats.t.sf(abs(delta) / se, dof))
            half = float(stats.t.ppf(0.975, dof)) * se
            ci = (round(delta - half, 3), round(delta + half, 3))
    margin = abs(ma) * min_effect_pct / 100.0
    verdict: Verdict
    if p is None:
        verdict = "unknown"
    elif ci is not None and -margin < ci[0] and ci[1] < margin:
        verdict = "same"  # the whole CI sits inside the equivalence margin
    elif p < alpha and pct <= -min_effect_pct:
        verdict = "improved"  # lower CPU is better
    elif p < alpha and pct >= min_effect_pct:
        verdict = "regressed"
    elif abs(pct) < min_effect_pct and p >= alpha:
        verdict = "same"
    else:
        verdict = "unknown"
    pct_ci = pct_interval(a, b, 0.95)
    return PointDelta(stations=0, baseline_mean=round(ma, 3), candidate_mean=round(mb, 3),
                        delta_pp=round(delta, 3), delta_pct=round(pct, 2),
                        p_value=None if p is None else round(p, 6), ci95_pp=ci,
                        ci95_pct=(round(pct_ci[0], 2), round(pct_ci[1], 2)) if pct_ci else None,
                        verdict=verdict)


def _conditions(store: RecordStore, rec: SweepRecord) -> list[WindowConditions]:
    return [w.conditions for p in rec.points
            for w in store.load("prof", p.profile_id, MeasurementRecord).windows]


async def run(ctx: LabContext, inp: CompareInput) -> CompareOutput:
    store = RecordStore(ctx.data_dir)
    a = store.load("swp", inp.baseline, SweepRecord)
    b = store.load("swp", inp.candidate, SweepRecord)
    ca, cb = _conditions(store, a), _conditions(store, b)
    diffs = sorted({d for x in ca[:1] for y in cb for d in x.differences(y)})
    if diffs:
        raise ToolError("refused", "the sweeps ran under different conditions: " + "; ".join(diffs[:5]),
                        "re-run both under the same pinned conditions (env_pin), then compare")
    bpoints = {p.stations: p for p in b.points}
    deltas = []
    for pa in a.points:
        pb = bpoints.get(pa.stations)
        if pb is None:
            continue
        d = welch_delta(pa.cpu_per_rep, pb.cpu_per_rep, inp.alpha, inp.min_effect_pct)
        deltas.append(d.model_copy(update={"stations": pa.stations}))
    if not deltas:
        raise ToolError("invalid_input", "the sweeps share no density",
                        f"baseline has {[p.stations for p in a.points]}, "
                        f"candidate {[p.stations for p in b.points]}")
    return CompareOutput(baseline=a.id, candidate=b.id, baseline_build=a.build_id,
                         candidate_build=b.build_id, deltas=deltas, verdict=deltas[-1].verdict)


SPEC = ToolSpec(name="compare", description=describe(__doc__), input=CompareInput,
                output=CompareOutput, run=run, effect="host_only", idempotent=True)
