"""gate_check: the six acceptance gates of seed 000 on a sweep, each with its evidence --
CPU monotonic over densities; unknown-frame % within budget; associated count equals the
datamodel count; governor and CLK_TCK verified in every window; RSS bounded (per-client growth
under the profile's limit); functional parity (clients held through the windows, disassociation
cleans up). Given A's sweep too, the two A/B gates: offered-load parity and the profile's declared
functional parity check.

A gate whose evidence the DUT cannot give (no clients, no clients reader, one density) is
`not_applicable` with the reason, never passed on made-up data. Reads records (and symbolizes
the densest point's perf.data when it is not yet symbolized).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

from pydantic import BaseModel, Field

from labwarden.core.measurements import ProfileRecord, SweepRecord
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.dut import datamodel
from labwarden.tools import parity
from labwarden.tools.context import LabContext

GateName = Literal["cpu_monotonic", "unknown_frames", "assoc_matches_datamodel",
                   "conditions_verified", "rss_bounded", "functional_parity",
                   "offered_load_parity", "declared_parity"]


class GateInput(ToolInput):
    sweep_id: str = Field(examples=["swp-1a2b3c4d5e6f"])
    baseline_sweep_id: str | None = Field(None, description="A's sweep: adds the two A/B gates -- "
                                          "offered-load parity (the monitor's RPC calls/s at the "
                                          "densest point within the profile's tolerance of A's) "
                                          "and the profile's declared functional parity check")


GateStatus = Literal["passed", "failed", "not_applicable"]


class Gate(BaseModel):
    name: GateName
    passed: bool = Field(description="status == passed (a gate that is not applicable has not "
                         "passed: it was not evaluated)")
    status: GateStatus = Field("passed", description="not_applicable: the DUT cannot give the "
                               "evidence (the reason is the evidence); never passed on made-up data")
    evidence: str = Field(description="the numbers the verdict rests on")

    @classmethod
    def judged(cls, name: GateName, passed: bool, evidence: str) -> Gate:
        return cls(name=name, passed=passed, status="passed" if passed else "failed",
                   evidence=evidence)

    @classmethod
    def not_applicable(cls, name: GateName, why: str) -> Gate:
        return cls(name=name, passed=False, status="not_applicable", evidence=f"n/a: {why}")


class GateOutput(BaseModel):
    sweep_id: str
    passed: bool = Field(description="no gate failed (not-applicable gates are listed apart)")
    failed: list[GateName]
    not_applicable: list[GateName] = Field(default_factory=list)
    gates: list[Gate]


async def _unknown_pct(ctx: LabContext, rec: SweepRecord, store: RecordStore) -> tuple[float | None, str]:
    densest = store.load("prof", rec.points[-1].profile_id, ProfileRecord)
    if not any(w.perf_data for w in densest.windows):
        return None, f"no perf.data at {densest.stations} clients (sweep ran with perf: false)"
    from labwarden.tools import registry

    spec = registry.get("symbolize")
    out = await spec.run(ctx, spec.input.model_validate({"profile_id": densest.id}))
    return float(out.unknown_pct), f"{out.unknown_pct:.3f}% unknown frames at {densest.stations} clients"  # type: ignore[attr-defined]


async def run(ctx: LabContext, inp: GateInput) -> GateOutput:
    store = RecordStore(ctx.data_dir)
    rec = store.load("swp", inp.sweep_id, SweepRecord)
    profiles = [store.load("prof", p.profile_id, ProfileRecord) for p in rec.points]
    no_clients = ctx.profile.load.kind == "none"
    counted = all(w.datamodel_start is not None for prof in profiles for w in prof.windows) \
        and rec.cleanup_count is not None
    gates: list[Gate] = []

    curve = [(p.stations, p.cpu_mean) for p in rec.points]
    mono = len(curve) > 1 and all(b[1] > a[1] for a, b in pairwise(curve))
    if no_clients and len(curve) == 1:
        gates.append(Gate.not_applicable("cpu_monotonic", "the lab has no load ([load] kind = "
                                         "\"none\"): one density, nothing to order"))
    else:
        gates.append(Gate.judged("cpu_monotonic", mono,
                                 " < ".join(f"{c:.2f}%@{n}" for n, c in curve)
                                 + ("" if len(curve) > 1 else " (one point: nothing to order)")))

    try:
        pct, evidence = await _unknown_pct(ctx, rec, store)
    except Exception as exc:  # a gate that cannot be evaluated fails, with the reason as evidence
        pct, evidence = None, f"symbolize failed: {exc}"
    budget = ctx.profile.gates.unknown_frames_pct_max
    gates.append(Gate.judged("unknown_frames", pct is not None and pct <= budget,
                             f"{evidence}; budget {budget:g}%"))

    if no_clients or not counted:
        gates.append(Gate.not_applicable(
            "assoc_matches_datamodel", "the lab has no clients ([load] kind = \"none\")"
            if no_clients else datamodel.NOT_APPLICABLE))
    else:
        bad = [f"{p.stations}: radios {p.per_radio}, windows "
               f"{[(w.datamodel_start, w.datamodel_end) for w in prof.windows]}"
               for p, prof in zip(rec.points, profiles, strict=True)
               if sum(p.per_radio) != p.stations
               or any(w.datamodel_start != p.stations for w in prof.windows)]
        gates.append(Gate.judged("assoc_matches_datamodel", not bad, "; ".join(bad) or
                                 "datamodel count == associated clients at every point"))

    windows = [w for prof in profiles for w in prof.windows]
    unpinned = [f"{prof.stations}/rep{w.rep}: {w.conditions.describe_cpufreq()}, CLK_TCK "
                f"{w.conditions.clk_tck}, verified {w.conditions.fingerprint_verified}"
                for prof in profiles for w in prof.windows
                if not (w.conditions.pinned() and w.conditions.clk_tck > 0
                        and w.conditions.fingerprint_verified)]
    first = windows[0].conditions if windows else None
    gates.append(Gate.judged("conditions_verified", not unpinned and bool(windows),
                             "; ".join(unpinned[:3]) or f"{len(windows)} windows: "
                             f"{first.describe_cpufreq() if first else '?'}, CLK_TCK "
                             f"{first.clk_tck if first else '?'}, fingerprint verified"))

    limit = ctx.profile.gates.rss_per_client_kb_max
    lo, hi = rec.points[0], rec.points[-1]
    span = hi.stations - lo.stations
    if span == 0:
        gates.append(Gate.not_applicable("rss_bounded", f"one client count ({lo.stations}): no "
                                         f"per-client growth to bound (RSS {hi.rss_kb} kB)"))
    else:
        per_client = (hi.rss_kb - lo.rss_kb) / span
        gates.append(Gate.judged("rss_bounded", per_client <= limit,
                                 f"RSS {lo.rss_kb} kB@{lo.stations} -> {hi.rss_kb} kB@{hi.stations}: "
                                 f"{per_client:.2f} kB/client (limit {limit:g})"))

    if no_clients or not counted:
        gates.append(Gate.not_applicable(
            "functional_parity", "the lab has no clients to hold or release" if no_clients
            else datamodel.NOT_APPLICABLE))
    else:
        dropped = [p.stations for p in rec.points if not p.clients_held]
        held = f"clients lost at {dropped}; " if dropped else "clients held in every window; "
        gates.append(Gate.judged("functional_parity", not dropped and rec.cleanup_count == 0,
                                 held + f"{rec.cleanup_count} left after disassociation"))

    if inp.baseline_sweep_id is not None:
        base = store.load("swp", inp.baseline_sweep_id, SweepRecord)
        counter = ctx.profile.decision.offered_load_counter
        densest_a = store.load("prof", base.points[-1].profile_id, ProfileRecord)
        loads = ([parity.window_loads([densest_a], counter), parity.window_loads(profiles[-1:], counter)]
                 if counter else [[], []])
        for g in (parity.offered_load(ctx.profile.decision, *loads, window_s=densest_a.window_s),
                  parity.functional(base.parity, rec.parity)):
            gates.append(Gate.judged(g.name, g.passed, g.evidence))  # type: ignore[arg-type]

    failed = [g.name for g in gates if g.status == "failed"]
    na = [g.name for g in gates if g.status == "not_applicable"]
    return GateOutput(sweep_id=rec.id, passed=not failed and len(na) < len(gates), failed=failed,
                      not_applicable=na, gates=gates)


SPEC = ToolSpec(name="gate_check", description=describe(__doc__), input=GateInput,
                output=GateOutput, run=run, effect="host_only", idempotent=True)
