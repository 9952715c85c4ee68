"""gate_check: the six acceptance gates of the WiFi-daemon field study on a sweep, each with its evidence --
CPU monotonic over the workload points; unknown-frame % within budget; associated count equals the
datamodel count; governor and CLK_TCK verified in every window; RSS bounded (per-client growth
under the profile's limit); functional parity (clients held through the windows, disassociation
cleans up). Given A's sweep too, the two A/B gates: offered-load parity and the profile's declared
functional parity check. On a saturation run (`saturate_id`, a traffic study) instead: its
1.2x/0.8x check held, the sender reached every rate called stable, conditions verified in every
window; given the baseline run too, both asked the same question.

A gate applies by declaration: one whose evidence the lab cannot give (no load axis, no clients
reader, one workload point, no offered-load counter or parity check declared, cpu_monotonic
without `[gates] load_drives_cpu`) is `not_applicable` with the reason -- never passed on made-up
data, never counted as failed. Reads records (and symbolizes
the densest point's perf.data when it is not yet symbolized).
"""

from __future__ import annotations

from itertools import pairwise

from pydantic import Field, model_validator

from labwarden.core.conditions import verified_evidence
from labwarden.core.measurements import MeasurementRecord, SweepRecord
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.dut import datamodel
from labwarden.results.gate_check import CheckedGate, GateOutput
from labwarden.results.saturate import SaturateRecord
from labwarden.results.symbolize import SymbolizeOutput
from labwarden.tools import parity, saturation_gates
from labwarden.tools.context import LabContext


class GateInput(ToolInput):
    sweep_id: str | None = Field(None, examples=["swp-1a2b3c4d5e6f"],
                                 description="the sweep to judge (or give saturate_id)")
    baseline_sweep_id: str | None = Field(None, description="A's sweep: adds the two A/B gates -- "
                                          "offered-load parity (the profile's offered-load counter "
                                          "at the densest point within its tolerance of A's) "
                                          "and the profile's declared functional parity check")
    saturate_id: str | None = Field(None, pattern=r"^sat-[0-9a-f]{12}$",
                                    examples=["sat-1a2b3c4d5e6f"], description="a saturation run "
                                    "to judge instead of a sweep (a traffic study)")
    baseline_saturate_id: str | None = Field(None, pattern=r"^sat-[0-9a-f]{12}$",
                                             description="the baseline's saturation run: adds "
                                             "the same-question gate")

    @model_validator(mode="after")
    def _one_record(self) -> GateInput:
        if (self.sweep_id is None) == (self.saturate_id is None):
            raise ValueError("give sweep_id (a sweep) or saturate_id (a saturation run), not both "
                             "and not neither")
        if self.baseline_sweep_id is not None and self.sweep_id is None:
            raise ValueError("baseline_sweep_id goes with sweep_id; a saturation run's baseline "
                             "is baseline_saturate_id")
        if self.baseline_saturate_id is not None and self.saturate_id is None:
            raise ValueError("baseline_saturate_id goes with saturate_id")
        return self


async def _unknown_pct(ctx: LabContext, rec: SweepRecord, store: RecordStore) -> tuple[float | None, str]:
    densest = store.load("prof", rec.points[-1].profile_id, MeasurementRecord)
    if not any(w.perf_data for w in densest.windows):
        return None, f"no perf.data at {densest.stations} clients (sweep ran with perf: false)"
    out = await ctx.call("symbolize", {"profile_id": densest.id}, SymbolizeOutput)  # a nested call, logged
    return float(out.unknown_pct), f"{out.unknown_pct:.3f}% unknown frames at {densest.stations} clients"


def gate_output(rid: str, gates: list[CheckedGate]) -> GateOutput:
    """The answer: failed and not-applicable gates listed apart (n/a never counts as failed)."""
    failed = [g.name for g in gates if g.status == "failed"]
    na = [g.name for g in gates if g.status == "not_applicable"]
    return GateOutput(sweep_id=rid, passed=not failed and len(na) < len(gates), failed=failed,
                      not_applicable=na, gates=gates)


async def run(ctx: LabContext, inp: GateInput) -> GateOutput:
    store = RecordStore(ctx.data_dir)
    if inp.saturate_id is not None:
        sat = store.load("sat", inp.saturate_id, SaturateRecord)
        base_sat = (store.load("sat", inp.baseline_saturate_id, SaturateRecord)
                    if inp.baseline_saturate_id else None)
        return gate_output(sat.id, saturation_gates.gates(sat, base_sat, CheckedGate.judged,
                                                          CheckedGate.not_applicable))
    assert inp.sweep_id is not None
    rec = store.load("swp", inp.sweep_id, SweepRecord)
    profiles = [store.load("prof", p.profile_id, MeasurementRecord) for p in rec.points]
    axis = load_drivers.DRIVERS[ctx.profile.load.kind].axis
    no_clients = axis is None
    counted = all(w.datamodel_start is not None for prof in profiles for w in prof.windows) \
        and rec.cleanup_count is not None
    gates: list[CheckedGate] = []

    curve = [(p.stations, p.cpu_mean) for p in rec.points]
    if not ctx.profile.gates.load_drives_cpu:
        gates.append(CheckedGate.not_applicable("cpu_monotonic", "the profile does not declare that the "
                                                "workload drives the target's CPU ([gates] "
                                                "load_drives_cpu)"))
    elif len(curve) == 1:
        gates.append(CheckedGate.not_applicable("cpu_monotonic", f"one workload point ({curve[0][0]}): "
                                                "nothing to order"))
    else:
        gates.append(CheckedGate.judged("cpu_monotonic", all(b[1] > a[1] for a, b in pairwise(curve)),
                                        " < ".join(f"{c:.2f}%@{n}" for n, c in curve)))

    try:
        pct, evidence = await _unknown_pct(ctx, rec, store)
    except Exception as exc:  # a gate that cannot be evaluated fails, with the reason as evidence
        pct, evidence = None, f"symbolize failed: {exc}"
    budget = ctx.profile.gates.unknown_frames_pct_max
    if pct is None and evidence.startswith("no perf.data"):  # asked not to record: not measured
        gates.append(CheckedGate.not_applicable("unknown_frames", evidence))
    else:
        gates.append(CheckedGate.judged("unknown_frames", pct is not None and pct <= budget,
                                        f"{evidence}; budget {budget:g}%"))

    if no_clients or not counted:
        gates.append(CheckedGate.not_applicable(
            "assoc_matches_datamodel", "the lab has no clients ([load] kind = \"none\")"
            if no_clients else datamodel.NOT_APPLICABLE))
    else:
        bad = [f"{p.stations}: radios {p.per_radio}, windows "
               f"{[(w.datamodel_start, w.datamodel_end) for w in prof.windows]}"
               for p, prof in zip(rec.points, profiles, strict=True)
               if (p.per_radio and sum(p.per_radio) != p.stations)  # [] = a total-only reader
               or any(w.datamodel_start != p.stations for w in prof.windows)]
        gates.append(CheckedGate.judged("assoc_matches_datamodel", not bad, "; ".join(bad) or
                                        "datamodel count == associated clients at every point"))

    ok, evidence = verified_evidence(
        [(f"{prof.stations}/rep{w.rep}", w.conditions) for prof in profiles for w in prof.windows])
    gates.append(CheckedGate.judged("conditions_verified", ok, evidence))

    limit = ctx.profile.gates.rss_per_client_kb_max
    lo, hi = rec.points[0], rec.points[-1]
    span = hi.stations - lo.stations
    if span == 0:
        gates.append(CheckedGate.not_applicable("rss_bounded", f"one workload point ({lo.stations}): no "
                                                f"per-client growth to bound (RSS {hi.rss_kb} kB)"))
    else:
        per_client = (hi.rss_kb - lo.rss_kb) / span
        gates.append(CheckedGate.judged("rss_bounded", per_client <= limit,
                                        f"RSS {lo.rss_kb} kB@{lo.stations} -> {hi.rss_kb} kB@{hi.stations}: "
                                        f"{per_client:.2f} kB/client (limit {limit:g})"))

    if no_clients or not counted:
        gates.append(CheckedGate.not_applicable(
            "functional_parity", "the lab has no clients to hold or release" if no_clients
            else datamodel.NOT_APPLICABLE))
    else:
        dropped = [p.stations for p in rec.points if not p.clients_held]
        held = f"clients lost at {dropped}; " if dropped else "clients held in every window; "
        gates.append(CheckedGate.judged("functional_parity", not dropped and rec.cleanup_count == 0,
                                        held + f"{rec.cleanup_count} left after disassociation"))

    if inp.baseline_sweep_id is not None:
        base = store.load("swp", inp.baseline_sweep_id, SweepRecord)
        counter = ctx.profile.decision.offered_load_counter
        densest_a = store.load("prof", base.points[-1].profile_id, MeasurementRecord)
        loads_a, loads_b = ((parity.window_loads([densest_a], counter),
                             parity.window_loads(profiles[-1:], counter)) if counter else ([], []))
        for g in (parity.offered_load(ctx.profile.decision, loads_a, loads_b, window_s=densest_a.window_s),
                  parity.functional(base.parity, rec.parity)):
            gates.append(CheckedGate.model_validate(g.model_dump()))

    return gate_output(rec.id, gates)


SPEC = ToolSpec(name="gate_check", description=describe(__doc__), input=GateInput,
                output=GateOutput, run=run, effect="host_only", idempotent=True)
