"""experiment: judge one candidate patch end to end -- build base (A) and base + patch (B), flash,
verify, screen A against B at the densest workload point (the profile's `[decision] densities`,
else the load's own: 114 clients on a station lab, 0 -- its own input -- on a DUT without a
load) with the pre-registered decision rule (adding windows while it says "unknown"), check
functional and offered-load parity, then for a survivor the full sweeps, compare and every gate;
decide kept / dropped / refuted / failed by a rule in code, and store the experiment as a record
with its cost.

Destructive: flashes A and B (on a lab whose flash is cheap, alternately), and at the end
leaves the board on the kept stack -- B when kept, else A, the base (`left_flashed` says which
and why; a fleet place handed back is left on A). One call per
candidate, with progress; every flash, verification, association, measurement, sweep, compare,
gate check and symbolization inside it is a nested call of its own (guarded -- each flash takes
a slot of `flashes_per_hour` -- and logged under the experiment's call). Kept only when the
verdict at the densest point is "improved", no gate failed (a gate whose evidence the lab cannot
give is not applicable: it does not block) and the offered load is the same where it is
measured; "refuted" when the rule decided "same".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime

from pydantic import Field

from labwarden.core.errors import LabError, ToolError
from labwarden.core.events import ModelCall, ToolCalled
from labwarden.core.experiments import (
    Arm,
    Cost,
    Decision,
    DensityDelta,
    Experiment,
    FlameRef,
    FunctionDelta,
    Gate,
    PowerCycle,
    Reproduction,
)
from labwarden.core.measurements import SweepRecord
from labwarden.core.records import RecordNotFound, RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.boardstate import BoardState
from labwarden.lab.config import LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.host import builder
from labwarden.lab.host.builds import compiled, load_manifest, recipe
from labwarden.lab.host.patchstore import PatchStore, ProtectedArtifact, check_ref, lab_patches
from labwarden.results.compare import CompareOutput
from labwarden.results.experiment import ExperimentOutput
from labwarden.results.gate_check import GateOutput
from labwarden.results.sweep import SweepOutput
from labwarden.results.symbolize import SymbolizeOutput
from labwarden.tools import abtest, parity
from labwarden.tools.context import LabContext
from labwarden.tools.powercycle import power_cycle
from labwarden.transcripts import pricing


class ExperimentInput(ToolInput):
    patch: str = Field(description="the candidate: a patch id from patch_submit (or a shipped one)",
                       examples=["bulk-pull-0123456789"])
    base_patches: list[str] | None = Field(None, max_length=16, description="A's patches (default: "
                                           "the base the patch was submitted on)")
    ref: str | None = Field(None, max_length=100, description="git ref (default: the patch's)")


def _cost(ctx: LabContext, since_tool: str) -> Cost:
    """Model usage of this session since the previous call of `since_tool` ended (the turns
    that produced this candidate)."""
    cost = Cost()
    if ctx.transcript is None or ctx.session_id is None:
        return cost
    for stored in ctx.transcript.events(ctx.session_id):
        ev = stored.event
        if isinstance(ev, ToolCalled) and ev.call.tool == since_tool:
            cost = Cost()
        elif isinstance(ev, ModelCall):
            cost.model_calls += 1
            cost.tokens += sum(pricing.tokens_by_kind(ev.usage).values())
            cost.usd += ev.cost_usd
    cost.usd = round(cost.usd, 6)
    return cost


async def _build(profile: LabProfile, patches: list[str], ref: str) -> str:
    manifest, _ = await compiled(recipe(profile), patches, ref)
    return manifest.build_id


def _same_protected(ctx: LabContext, exp: Experiment) -> None:
    """A and B must carry the same code for every protected output (the monitor, the load
    side): a candidate that changes it, by any route, is never measured, let alone kept."""
    names = ctx.profile.build.protected_artifacts
    assert exp.build_a and exp.build_b
    moved = builder.changed_outputs(load_manifest(ctx.profile, exp.build_a),
                                    load_manifest(ctx.profile, exp.build_b), names) if names else []
    if moved:
        raise ProtectedArtifact(moved, f"patch {exp.patch}")


def _label(patches: list[str], ref: str) -> str:
    text = "+".join(patches) if patches else f"base {ref}"
    return text[:64]


def _known_a_sweep(profile: LabProfile, store: RecordStore, build: str, place: str | None) -> str | None:
    """An earlier full sweep of `build` on `place` taken with the rule's settings: a kept
    candidate's sweep (the next base's), or one the agent took itself with the experiment's
    settings (lab_status `workload.sweep`, perf and idle baseline on: a flash saved). On a fleet a
    sweep from another place never stands in for A: A and B are compared on one board. No older
    than `[decision] reuse_a_max_age_s`, as A's screening windows: one sweep taken in an unlucky
    moment otherwise decided the full-sweep gates of every later candidate of a night (the
    vlab's drift bench: nine improved candidates dropped by one edge window of A's sweep)."""
    dec = profile.decision
    points = load_drivers.points(profile)
    now = datetime.now(UTC)

    def usable(rec: SweepRecord) -> bool:
        age = (now - rec.started_at).total_seconds()
        return (0 <= age <= dec.reuse_a_max_age_s
                and rec.build_id == build and rec.place == place
                and [p.stations for p in rec.points] == points and rec.reps == dec.sweep_reps
                and rec.window_s == dec.window_s)

    for eid in reversed(store.ids("exp")):
        exp = store.load("exp", eid, Experiment)
        for sid, bid in ((exp.sweep_b, exp.build_b), (exp.sweep_a, exp.build_a)):
            if sid and bid == build:
                try:
                    rec = store.load("swp", sid, SweepRecord)
                except RecordNotFound:
                    continue
                if usable(rec):  # its own place, not the experiment's: a fleet's survivor may
                    return sid  # sweep on the place it reproduced on (_reproduce)
    for sid in reversed(store.ids("swp")):  # the agent's own (records older than the fields
        # that say how it was taken -- place, settle, perf -- never match)
        try:
            rec = store.load("swp", sid, SweepRecord)
        except RecordNotFound:
            continue
        if usable(rec) and rec.perf and rec.idle_baseline and rec.settle_s == dec.settle_s:
            return sid
    return None


async def _a_sweep(ctx: LabContext, store: RecordStore, build: str, label: str) -> str:
    """A's full sweep: an earlier one on this board (_known_a_sweep), else a new one -- which
    a fleet's pool knows of while it runs, so a survivor on another place can wait for this one
    instead of sweeping A again (_holders_of_a)."""
    known = _known_a_sweep(ctx.profile, store, build, ctx.place_name)
    if known is not None:
        return known
    if ctx.fleet is None or ctx.place_name is None:
        return await _sweep(ctx, build, label)
    with ctx.fleet.sweeping(ctx.place_name, build):
        return await _sweep(ctx, build, label)


async def _sweep(ctx: LabContext, build: str, label: str) -> str:
    dec = ctx.profile.decision
    await abtest.switch_to(ctx, build)
    out = await ctx.call("sweep", {"densities": load_drivers.points(ctx.profile),
                                   "reps": dec.sweep_reps, "window_s": dec.window_s, "perf": True,
                                   "label": label, "settle_s": dec.settle_s}, SweepOutput)
    return out.sweep_id


async def _survivor(ctx: LabContext, exp: Experiment, store: RecordStore, labels: tuple[str, str],
                    builds: tuple[str, str] | None = None) -> None:
    """Full sweeps, compare, gates and the differential flame graph of an improved candidate.
    `builds`: A and B as built for this place when it is not the one screened first."""
    build_a, build_b = builds or (exp.build_a, exp.build_b)
    assert build_a and build_b
    await ctx.report(3, 5, "survivor: full sweeps of A and B")
    exp.sweep_a = await _a_sweep(ctx, store, build_a, labels[0])
    exp.sweep_b = await _sweep(ctx, build_b, labels[1])
    cmp = await ctx.call("compare", {"baseline": exp.sweep_a, "candidate": exp.sweep_b},
                         CompareOutput)
    exp.deltas = [DensityDelta(stations=d.stations, a_mean=d.baseline_mean, b_mean=d.candidate_mean,
                               delta_pct=d.delta_pct, p_value=d.p_value) for d in cmp.deltas]
    await ctx.report(4, 5, "gates")
    gates = await ctx.call("gate_check", {"sweep_id": exp.sweep_b,
                                          "baseline_sweep_id": exp.sweep_a}, GateOutput)
    screened = {x.name for x in exp.gates}  # the parity gates again, now on the full sweeps
    exp.gates += [Gate(name=g.name, passed=g.passed, status=g.status,
                       evidence=("full sweep: " if g.name in screened else "") + g.evidence)
                  for g in gates.gates]
    a, b = (store.load("swp", s, SweepRecord) for s in (exp.sweep_a, exp.sweep_b))
    try:
        sym = await ctx.call("symbolize", {"profile_id": b.points[-1].profile_id,
                                           "baseline_profile_id": a.points[-1].profile_id,
                                           "top": 8}, SymbolizeOutput)
        exp.flame = FlameRef(profile_id=sym.profile_id, baseline_profile_id=a.points[-1].profile_id,
                             key=sym.key, svg=sym.svg, diff_svg=sym.diff_svg,
                             baseline_svg=sym.baseline_svg, stations=sym.stations,
                             samples=sym.samples, unknown_pct=sym.unknown_pct)
        exp.flame_deltas = [FunctionDelta.model_validate(d.model_dump()) for d in sym.top_deltas[:6]]
    except LabError as exc:  # a flame graph is evidence, not a gate: say why it is missing
        exp.flame = FlameRef(error=exc.problem)


def _decide(exp: Experiment, where: str) -> tuple[Decision, str]:
    """The rule, in code: kept only when the densest point says "improved", the offered load is
    the same, and no gate failed (a gate the lab cannot give evidence for is not_applicable: it
    neither passes nor blocks). `where`: the screened workload point in words."""
    assert exp.screening is not None and exp.screening.looks
    look = exp.screening.final
    load = next((g for g in exp.gates if g.name == "offered_load_parity"), None)
    if look.verdict == "same":
        return "refuted", f"no effect: the rule decided 'same' at {where} -- {look.describe()}"
    if look.verdict == "regressed":
        return "dropped", f"regressed at {where} -- {look.describe()}"
    if look.verdict == "unknown" and look.note and look.note.startswith("unknown:"):
        return "dropped", f"undecided, {look.note[len('unknown: '):]} -- {look.describe()}"
    if look.verdict == "unknown":
        return "dropped", (f"undecided after {look.n_b} windows (the cap) -- {look.describe()}")
    if load is not None and load.failed:
        return "dropped", f"offered load changed: {load.evidence} -- the drop is less work, not a fix"
    failed = [g for g in exp.gates if g.failed]
    if failed:
        return "dropped", "gates failed: " + "; ".join(f"{g.name} ({g.evidence})" for g in failed)
    if exp.sweep_b is None:
        return "dropped", "no full sweep (internal: a survivor always gets one)"
    na = list(dict.fromkeys(g.name for g in exp.gates if g.status == "not_applicable"))
    return "kept", (f"improved at {where} ({look.delta_pct:+.1f}%, {look.interval_text()}), "
                    + ("offered load not lower, " if load is not None and load.status == "passed"
                       else "")
                    + "no gate failed" + (f" (not applicable here: {', '.join(na)})" if na else ""))


REUSE_SCAN = 40
"""Experiments looked back through for a reusable A (newest first): a night's recent ones."""


def _reusable_a(ctx: LabContext, store: RecordStore, build: str, stations: int) -> tuple[Arm, str] | None:
    """Windows of `build` from a recent screening on this place, taken with the rule's settings
    (window_s, workload point, metric cpu) no longer than `[decision] reuse_a_max_age_s` ago:
    they may stand in for A's block (abtest.AB checks them against a short window first)."""
    dec = ctx.profile.decision
    if not dec.reuse_a_max_age_s:
        return None
    now = datetime.now(UTC)
    for eid in reversed(store.ids("exp")[-REUSE_SCAN:]):
        try:
            old = store.load("exp", eid, Experiment)
        except RecordNotFound:
            continue
        scr, ended = old.screening, old.ended_at or old.started_at
        if scr is None or old.place != ctx.place_name or scr.metric != "cpu" \
                or scr.window_s != dec.window_s or scr.stations != stations \
                or (now - ended).total_seconds() > dec.reuse_a_max_age_s:
            continue
        for arm in (scr.a, scr.b):
            kept = [v for i, v in enumerate(arm.values) if i not in arm.left_out]
            if arm.build_id == build and len(kept) >= dec.min_windows:
                return Arm(build_id=build, values=kept, load=arm.load,
                           env=[e for i, e in enumerate(arm.env) if i not in arm.left_out],
                           profile_ids=arm.profile_ids), eid
    return None


async def _screen(ctx: LabContext, exp: Experiment) -> None:
    """The adaptive A/B at the densest point, with both parity gates; the screening (and the
    parity outputs) land on `exp` even when it stops early."""
    assert exp.build_a and exp.build_b
    dec = ctx.profile.decision
    point = load_drivers.points(ctx.profile)[-1]
    found = _reusable_a(ctx, RecordStore(ctx.data_dir), exp.build_a, point)
    ab = abtest.AB(ctx, exp.build_a, exp.build_b, stations=point, rule=dec,
                   window_s=dec.window_s, interleave=dec.interleave, with_parity=True,
                   reuse_a=found[0] if found else None, reuse_from=found[1] if found else None)

    async def look(text: str) -> None:
        await ctx.report(2, 5, "look: " + text)

    try:
        await ab.run(on_look=look)
    finally:
        exp.parity_a, exp.parity_b = ab.parity.get("a"), ab.parity.get("b")
        exp.screening = ab.screening
        exp.gates = [parity.offered_load(ctx.profile.decision, ab.screening.a.load, ab.screening.b.load),
                     parity.functional(exp.parity_a, exp.parity_b)]


async def _screen_again(on: LabContext, exp: Experiment, *, same_place: bool) -> Reproduction:
    """A and B screened again on `on` with the same rule (the parity gates held on the first
    place; the second screening asks only whether the effect is there)."""
    assert exp.build_a and exp.build_b and exp.screening is not None
    dec = on.profile.decision

    async def look(text: str) -> None:
        await on.report(5, 6, f"reproducing on {on.place_name}: {text}")

    rep = Reproduction(place=on.place_name, same_place=same_place)
    try:
        # built for this place (a vlab fleet's DUT paths differ: the same ids on a real fleet)
        rep.build_a = await _build(on.profile, exp.base_patches, exp.ref)
        rep.build_b = await _build(on.profile, [*exp.base_patches, exp.patch], exp.ref)
        ab = abtest.AB(on, rep.build_a, rep.build_b, stations=exp.screening.stations, rule=dec,
                       window_s=dec.window_s, interleave=dec.interleave, with_parity=False)
        try:
            await ab.run(on_look=look)
        finally:
            rep.screening = ab.screening if ab.screening.looks else None
    except LabError as exc:
        rep.error = exc.problem
    rep.reproduced = rep.error is None and rep.screening is not None \
        and rep.screening.final.verdict == "improved"
    return rep


async def _again_after_power_cycle(ctx: LabContext, exp: Experiment) -> Reproduction:
    """The one-place reproduction: the place power-cycled and its build verified again first
    (tools/powercycle.py); where its kind has no power driver, screened again without one and
    the record says why; a DUT that does not come back is not screened (and is probed)."""
    assert ctx.fleet is not None and ctx.place_name is not None
    try:
        cycle = await power_cycle(ctx)
    except LabError as exc:
        failed = PowerCycle(done=False, how=f"power cycle failed: {exc.problem}")
        if (dead := await ctx.fleet.probe(ctx)) is not None:
            ctx.fleet.mark(ctx.place_name, "bad", f"{dead} (after a power cycle for {exp.id})")
        return Reproduction(place=ctx.place_name, same_place=True, power_cycle=failed,
                            error=failed.how)
    rep = await _screen_again(ctx, exp, same_place=True)
    rep.power_cycle = cycle
    return rep


Survive = Callable[[LabContext, Reproduction], Awaitable[None]]
"""What runs on the reproducing place once the candidate reproduced there (_reproduce)."""

REPRODUCE_PRIO = 1.0
"""A reproduction's reservation is served before new experiments' (labgrid orders waiting
reservations by priority, then age): a keep is confirmed as soon as another place frees, not
after every experiment queued before it -- which also left its first place idle at the end of
a night while the last keep waited (bench/fleet_throughput.py: 89 s of a 387 s run)."""


async def _holders_of_a(ctx: LabContext, exp: Experiment, store: RecordStore) -> list[str]:
    """The other good places that hold a full sweep of A (built for that place) or are taking
    one now: empty when this place holds one itself (its survivor sweeps here)."""
    pool = ctx.fleet
    assert pool is not None and exp.build_a is not None
    if _known_a_sweep(ctx.profile, store, exp.build_a, ctx.place_name) is not None:
        return []
    swept = set()  # places with any full sweep on record: only those are worth a build
    for sid in store.ids("swp"):
        with contextlib.suppress(RecordNotFound):
            swept.add(store.load("swp", sid, SweepRecord).place)
    holders = []
    for place in await pool.good_places({ctx.place_name} if ctx.place_name else set()):
        if place not in swept and not pool.is_sweeping(place):
            continue
        on = pool.profile_of(place)
        build = await _build(on, exp.base_patches, exp.ref)  # a vlab fleet's differ per place
        if pool.is_sweeping(place, build) or _known_a_sweep(on, store, build, place) is not None:
            holders.append(place)
    return holders


async def _reproduce(ctx: LabContext, exp: Experiment, where: str, *,
                     holders: Collection[str] = (), then: Survive | None = None) -> None:
    """Reproduce before keep (fleet): a candidate decided "improved" is screened again on
    another good place -- its own place handed back first, so two experiments waiting for each
    other's place cannot deadlock -- or, with no other good place, on its own place again after
    a power cycle (every arm re-flashed). A second place whose DUT dies is marked bad and
    another is tried; a candidate that does not reproduce is dropped with both screenings in
    the record.

    `holders`: places holding a sweep of A this place lacks -- the second screening waits for
    one of them (while one stays good) and `then` runs there once it reproduced: the survivor's
    sweeps, so A is not swept again on a place of its own (a fleet's one extra cost over one
    place: bench/fleet_throughput.py)."""
    pool = ctx.fleet
    assert pool is not None and exp.screening is not None
    here = ctx.place_name
    tried = {here} if here else set()
    first = exp.screening.final
    gates = list(exp.gates)
    while True:
        good = await pool.good_places(tried)
        if not good:
            if here not in pool.health.bad() and ctx.place is not None and ctx.place.held:
                rep = await _again_after_power_cycle(ctx, exp)
                if rep.reproduced and then is not None:
                    await then(ctx, rep)
            else:
                rep = Reproduction(place=None, error="no good place left to screen it again on")
            break
        wanted = [p for p in good if p in holders]
        exclude = tried | (set(good) - set(wanted)) if wanted else tried
        # its place goes to the next experiment while it reproduces elsewhere: its sweeps are
        # on record first (as not finished), to stand in for A on that place (_known_a_sweep)
        RecordStore(ctx.data_dir).save("exp", exp.id, exp.model_copy(update={
            "decision": "failed", "reason": "not finished: reproducing on another place"}))
        if ctx.place is not None and ctx.place.held:  # a place handed back is left on the base
            exp.left_flashed, why = await abtest.leave_on(
                ctx, exp.build_a, "A (the base): handed back while the candidate reproduces "
                "elsewhere")
            exp.left_why.append(why)
        await pool.hand_back(ctx)
        failed: LabError | None = None
        async with pool.session(exclude=exclude, prio=REPRODUCE_PRIO) as other:
            rep = await _screen_again(other, exp, same_place=False)
            if rep.reproduced and then is not None:
                try:
                    await then(other, rep)
                    rep.survivor_here = True
                except LabError as exc:
                    failed = exc
            if rep.error is None:  # left on what the candidate's verdict keeps there
                keep = rep.reproduced and failed is None and (
                    then is None or _decide(exp, where)[0] == "kept")
                _, why = await abtest.leave_on(
                    other, rep.build_b if keep else rep.build_a,
                    "B (kept: reproduced)" if keep else "A (the base)",
                    spent=abtest.budget_spent(failed) if failed else None)
                exp.left_why.append(why)
            dead = await pool.probe(other) if rep.error is not None or failed else None
        if dead is None:
            if failed is not None:  # its DUT is fine: the survivor failed as it would have here
                exp.reproduction = rep
                raise failed
            break
        assert other.place_name is not None
        why = rep.error or (f"survivor: {failed.problem}" if failed else "")
        pool.mark(other.place_name, "bad", f"{dead} (while reproducing {exp.id}: {why})")
        tried.add(other.place_name)
        exp.gates, exp.sweep_a, exp.sweep_b = list(gates), None, None  # nothing kept from it
    exp.reproduction = rep
    if rep.reproduced:
        if then is not None:  # decided only now, on the full sweeps taken there
            exp.decision, exp.reason = _decide(exp, where)
        exp.reason += f"; reproduced {rep.describe()}"
        return
    exp.decision = "dropped"
    exp.reason = (f"did not reproduce on {rep.place or 'another place'}: {rep.describe()}; "
                  f"first on {here} at {where}: {first.describe()}")


def _precheck(ctx: LabContext, inp: ExperimentInput) -> None:
    # another principal's submitted patch does not exist for this caller (lab/host/patchstore.py)
    lab_patches(ctx.data_dir).check("patch", [inp.patch, *(inp.base_patches or [])],
                                    ctx.profile.patch_roots(), ctx.principal, unknown=True)
    check_ref(ctx.profile, ctx.data_dir, "ref", inp.ref, ctx.principal)
    _known(ctx, [inp.patch, *(inp.base_patches or [])])


def _known(ctx: LabContext, patches: list[str]) -> None:
    """Refuse an unknown patch id before anything is recorded (a typo is not an experiment)."""
    rec = recipe(ctx.profile)
    for pid in patches:
        try:
            builder.resolve_patch(pid, rec.patches_dirs)
        except builder.BuildError as exc:
            raise ToolError("invalid_input", f"patch: {exc.lines[0] if exc.lines else pid}",
                            exc.remedy + "; patch_submit stores new ones") from None


async def run(ctx: LabContext, inp: ExperimentInput) -> ExperimentOutput:
    t0 = time.monotonic()
    store = RecordStore(ctx.data_dir)
    _known(ctx, [inp.patch, *(inp.base_patches or [])])
    meta = lab_patches(ctx.data_dir).meta(inp.patch)
    base = inp.base_patches if inp.base_patches is not None else (meta.base_patches if meta else [])
    ref = inp.ref or (meta.ref if meta else "HEAD")
    exp = Experiment(id=store.new_id("exp"), patch=inp.patch, patch_name=meta.name if meta else None,
                     author=PatchStore.shown(meta, ctx.principal).author if meta else None,
                     ref=ref, base_patches=base,
                     session_id=ctx.session_id, started_at=datetime.now(UTC), decision="failed",
                     reason="not finished", place=ctx.place_name)
    labels = (_label(base, ref), _label([*base, meta.name if meta else inp.patch], ref))
    before = ctx.peek_state().model_copy()  # what the board ran before this experiment
    spent: str | None = None
    where = load_drivers.label(load_drivers.for_profile(ctx.profile, ctx.device),
                               load_drivers.points(ctx.profile)[-1])
    try:
        await ctx.report(0, 5, f"building A ({labels[0]}) and B ({labels[1]})")
        exp.build_a = await _build(ctx.profile, base, ref)
        exp.build_b = await _build(ctx.profile, [*base, inp.patch], ref)
        _same_protected(ctx, exp)
        await ctx.report(1, 5, f"screening at {where} (A {exp.build_a}, B {exp.build_b})")
        await _screen(ctx, exp)
        assert exp.screening is not None
        load_ok = not any(g.failed for g in exp.gates if g.name == "offered_load_parity")
        holders: list[str] = []
        if exp.screening.final.verdict == "improved" and load_ok:
            if ctx.fleet is not None:
                holders = await _holders_of_a(ctx, exp, store)
            if not holders:
                await _survivor(ctx, exp, store, labels)
        if holders:  # reproduced first, where A's sweep is, and its survivor swept there
            async def survive(on: LabContext, rep: Reproduction) -> None:
                assert rep.build_a and rep.build_b
                await _survivor(on, exp, store, labels, (rep.build_a, rep.build_b))

            await _reproduce(ctx, exp, where, holders=holders, then=survive)
        else:
            exp.decision, exp.reason = _decide(exp, where)
            if exp.decision == "kept" and ctx.fleet is not None:
                await _reproduce(ctx, exp, where)
    except ProtectedArtifact as exc:  # before any flash: nothing to judge
        exp.decision, exp.reason = "dropped", exc.problem
    except abtest.ParityMismatch as exc:  # before B's windows: nothing else to judge
        exp.gates = [g for g in exp.gates if g.name == "declared_parity"]
        exp.decision, exp.reason = "dropped", exc.problem
    except LabError as exc:
        detail = f" ({'; '.join(exc.lines[:3])})" if exc.lines else ""
        exp.decision, exp.reason = "failed", f"{exc.kind}: {exc.problem}{detail}"
        spent = abtest.budget_spent(exc)
    await _leave(ctx, exp, before, spent)
    exp.ended_at = datetime.now(UTC)
    exp.cost = _cost(ctx, "experiment")
    exp.cost.lab_seconds = round(time.monotonic() - t0, 2)
    if exp.screening is not None:
        exp.cost.window_seconds = round(exp.screening.a.window_seconds
                                        + exp.screening.b.window_seconds, 2)
    store.save("exp", exp.id, exp)
    await ctx.report(5, 5, f"{exp.decision}: {exp.reason[:200]}")
    return summarize(exp)


async def _leave(ctx: LabContext, exp: Experiment, before: BoardState, spent: str | None) -> None:
    """Leave the board on the kept stack: B when kept, else A -- the base, what the candidate
    was judged against (a regressed or dropped B never stays flashed). Flashed back through the
    nested flash + fingerprint_verify (abtest.leave_on). A board this experiment never flashed
    (refused before any measurement) stays as it was; a fleet place already handed back was
    left on A then (_reproduce)."""
    lease = ctx.place  # a place handed back (fleet) is not ours to flash; a labgrid target
    # with no place (the qlab's local env) holds nothing and is still this session's board
    if lease is not None and getattr(lease, "place", None) is not None \
            and not getattr(lease, "held", True):
        return
    state = ctx.peek_state()
    if exp.screening is None and (state.flashed_build, state.verified_build) == (
            before.flashed_build, before.verified_build):
        here = state.verified_build if state.fingerprint_ok() else None
        exp.left_flashed = here
        exp.left_why.insert(0, f"left on {here or 'an unverified image'}: nothing was flashed "
                            f"({exp.decision} before any measurement)")
        return
    keep = exp.decision == "kept"
    exp.left_flashed, why = await abtest.leave_on(
        ctx, exp.build_b if keep else exp.build_a,
        "B (kept)" if keep else f"A (the base; B {exp.decision})", spent=spent)
    exp.left_why.insert(0, why)


def summarize(exp: Experiment) -> ExperimentOutput:
    look = exp.screening.final if exp.screening and exp.screening.looks else None
    load = next((g.evidence for g in exp.gates if g.name == "offered_load_parity"), None)
    return ExperimentOutput(
        experiment_id=exp.id, patch=exp.patch, decision=exp.decision, reason=exp.reason,
        verdict=look.verdict if look else None,
        stations=exp.screening.stations if exp.screening else None,
        mean_a=look.mean_a if look else None, mean_b=look.mean_b if look else None,
        delta_pct=look.delta_pct if look else None, ci_pct=look.ci_pct if look else None,
        equivalence_pct=look.same_ci_pct if look else None,
        windows=(look.n_a, look.n_b) if look else None, offered_load=load,
        gates_failed=[g.name for g in exp.gates if g.failed],
        gates_not_applicable=list(dict.fromkeys(g.name for g in exp.gates
                                                if g.status == "not_applicable")),
        build_a=exp.build_a,
        build_b=exp.build_b, sweep_a=exp.sweep_a, sweep_b=exp.sweep_b, cost_usd=exp.cost.usd,
        lab_seconds=exp.cost.lab_seconds, left_flashed=exp.left_flashed,
        left_flashed_why="; ".join(exp.left_why) or None,
        design=exp.screening.describe_design() or None if exp.screening else None)


SPEC = ToolSpec(name="experiment", description=describe(__doc__), input=ExperimentInput,
                output=ExperimentOutput, run=run, effect="destructive",
                requires=frozenset({"lease", "board_healthy", "env_pinned", "topology_asserted"}),
                budget_class="measure", precheck=_precheck)
"""Not `counts_as_flash`: each of its flashes is a nested flash call, which takes its own slot."""
