"""The guard: checks each call against what the tool's spec declares and the profile's policy,
heals what the policy allows (then re-checks), and refuses the rest with a code, a reason and a
remedy. It never runs the tool's side effect, and it reads only the spec -- no tool names.

Order: the call's budget slot is taken at the door (`admit`, before its arguments are even
read: refused and malformed calls count). Then `check`: argument safety (identifiers, paths,
suspects), board health, fingerprint, knobs (read and judged; nothing changes yet), the lease
(only when the call needs it or a heal will change the DUT), the flash rate (per DUT, across
sessions), then the heals, then -- for a measuring tool -- the conditions it runs under.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labwarden.core.conditions import CallConditions
from labwarden.core.devtext import quote
from labwarden.core.events import GuardDecision
from labwarden.core.spec import Requirement, ToolSpec
from labwarden.guardrails import argsafety, flashrate, paths, suspects
from labwarden.guardrails import budget as budgets
from labwarden.guardrails.budget import BudgetState
from labwarden.guardrails.context import GuardContext
from labwarden.guardrails.lease import Lease
from labwarden.guardrails.refusal import Refused, refuse
from labwarden.lab import knobs
from labwarden.lab.boardstate import BoardState


@dataclass
class Admission:
    """What the guard decided for one call that may run: the heals it carried out, the
    conditions a measuring call runs under, and the flash slot it took (given back if the
    flash fails). One per call: concurrent calls never share it."""

    decisions: list[GuardDecision] = field(default_factory=list)
    conditions: CallConditions | None = None
    flash_token: float | None = None


class Guard:
    def __init__(self, ctx: GuardContext, holder: str):
        self.ctx = ctx
        prof = ctx.profile
        self.budget = BudgetState(prof.policy.budgets)
        self.lease = Lease(ctx.device, prof.dut.paths.run, holder, prof.policy.lease_ttl_s)
        self.flashes = flashrate.FlashRate(ctx.board.data_dir, ctx.device.addr,
                                           prof.policy.budgets.flashes_per_hour)
        self.session = holder.rsplit("/", 1)[-1]

    def admit(self, tool: str, *, nested: bool = False) -> None:
        """Take one call's slot of the session's budget at the door, before anything else --
        unknown tools and malformed arguments count too. Raises Refused when it is spent.

        A nested call (a tool's own `ctx.call`) is not admitted again: its parent was. It takes
        no slot of `tool_calls` -- that budget bounds the client's decisions, and an
        experiment's dozens of flashes and windows would otherwise make it impossible under a
        budget sized for an agent; the parent's wall-time deadline bounds the whole tree (a
        clean-up a cancelled parent runs must not be refused for the time that ran out), and
        tokens and dollars are spent by the model, never by a nested call. Each nested flash
        still takes its own slot of `flashes_per_hour` in `check`."""
        if nested:
            return
        over = self.budget.admit()
        if over:
            raise refuse(tool, "budget_exceeded", over, budgets.REMEDY)

    # -- input safety ----------------------------------------------------------------------
    def _inputs(self, spec: ToolSpec, args: dict[str, Any]) -> None:
        checked = {k: v for k, v in args.items() if k not in spec.free_text}
        bad = argsafety.problems(checked, path_fields=spec.path_args)
        if bad:
            raise refuse(spec.name, "unsafe_argument", "; ".join(bad[:3]),
                         "pass plain identifiers; arguments are data, never shell text")
        prof = self.ctx.profile
        for arg in spec.path_args:
            for item in args.get(arg) or []:
                if isinstance(item, str) and "/" in item:
                    try:
                        paths.contained(item, prof.patch_roots(), what=arg)
                    except paths.PathRefused as exc:
                        raise refuse(spec.name, "unsafe_path", exc.problem,
                                     "use a patch id from the lab's patch directories, or submit "
                                     "the diff with `patch_submit`") from None
        name = args.get(spec.suspect_arg) if spec.suspect_arg else None
        if isinstance(name, str) and (why := suspects.problem(prof.target, name)) is not None:
            raise refuse(spec.name, "suspect_not_allowed", why, suspects.REMEDY)

    # -- the labgrid place ---------------------------------------------------------------------
    async def _hold_place(self, spec: ToolSpec, nested: bool) -> None:
        """A DUT reached as a labgrid place (a RemotePlace, a fleet's leased place, a place's own
        profile with [dut.place]) is touched only while this lab holds the place: before any call
        that touches the DUT, the place is acquired at the coordinator, or confirmed still ours.
        Held by someone else (or reserved for them): refused, naming them. A nested call runs
        under its parent's confirmation."""
        place = self.ctx.device.place
        if place is None or place.place is None or spec.effect == "host_only" or (nested and place.held):
            return
        from labwarden.lab.labgrid import PlaceBusy

        try:
            await place.hold()
        except PlaceBusy as exc:
            raise refuse(spec.name, "place_held", exc.problem, exc.remedy) from None

    # -- board health ------------------------------------------------------------------------
    def _health(self, spec: ToolSpec, args: dict[str, Any], state: BoardState) -> None:
        if state.board_health == "bad" and spec.health != "observe":
            raise refuse(spec.name, "board_bad", f"the board is bad: {state.health_reason}",
                         "a person must inspect it, then `labwarden lab clear-bad` (with --place "
                         "on a fleet)")
        if state.board_health == "unknown":
            known = {self.ctx.profile.build.baseline, state.verified_build} - {None}
            unknown_image = spec.health == "restore" and spec.image_arg is not None \
                and args.get(spec.image_arg) not in known
            if spec.health == "none" or unknown_image:
                images = ", ".join(sorted(k for k in known if k)) or "the baseline"
                raise refuse(spec.name, "board_unknown", f"the board is unknown: {state.health_reason}",
                             f"run a health check: flash a known image ({images}), then "
                             "fingerprint_verify it")

    # -- knobs ---------------------------------------------------------------------------------
    async def _plan_heals(self, tool: str, requires: frozenset[Requirement]) -> list[knobs.Knob]:
        """Read and judge every knob the tool's requirements depend on; refuse what policy may not
        heal. Nothing on the DUT changes here: heals run only after the lease is held."""
        if not requires:  # no knob serves no requirement: nothing to bind or read
            return []
        heal = set(self.ctx.profile.policy.heal)
        plan: list[knobs.Knob] = []
        for knob in knobs.pinned(self.ctx.device, self.ctx.profile):
            if knob.requirement not in requires:
                continue
            state = await knob.state()  # a knob the DUT lacks is not applicable: ok, no heal
            if state.ok:
                continue
            if knob.name not in heal:
                raise refuse(tool, knob.refusal, knob.refusal_reason(state), knob.remedy)
            plan.append(knob)
        return plan

    async def _heal(self, tool: str, plan: list[knobs.Knob]) -> list[str]:
        changes: list[str] = []
        for knob in plan:
            changes += await knob.pin()
            again = await knob.state()
            if not again.ok:
                raise refuse(tool, knob.refusal, f"{knob.name} still {quote(again.value)} after healing",
                             "check the paths and [topology] in the lab profile")
        return changes

    async def heal_drift(self, tool: str, requires: frozenset[Requirement],
                         why: str) -> GuardDecision | None:
        """Heal, under a call that is running (`tool`, holding the lease), what its requirements
        need and something it did drifted -- a nested flash rebooted the DUT. The same plan,
        policy and pin() as before a call; None when nothing drifted. Raises Refused."""
        plan = await self._plan_heals(tool, requires)
        if not plan:
            return None
        if not self.lease.held:
            other = await self.lease.acquire()
            if other is not None:
                raise refuse(tool, "lease_held", f"the DUT is leased to {other.describe()}",
                             "wait for it to expire or ask the holder to end their session")
        changes = await self._heal(tool, plan)
        return GuardDecision(tool=tool, decision="heal", changes=changes,
                             reason=f"healed {why}: {', '.join(k.name for k in plan)}")

    async def _conditions(self, state: BoardState) -> CallConditions:
        """What a measuring call runs under (stored on its transcript event)."""
        dev, prof = self.ctx.device, self.ctx.profile
        gov, boost = knobs.Governor(dev, prof), knobs.Boost(dev, prof)
        gov_missing = await gov.available()
        boost_state = await boost.state()
        na = {"governor": gov_missing} if gov_missing else {}
        if not boost_state.applicable:  # recorded as not applicable, never as "off"
            na["boost"] = boost_state.value.removeprefix("n/a: ")
        return CallConditions(fingerprint_verified=state.fingerprint_ok(),
                              governors=await gov.governors() if gov_missing is None else [],
                              boost=boost_state.value, not_applicable=na)

    # -- the check -------------------------------------------------------------------------
    async def check(self, spec: ToolSpec, args: dict[str, Any],
                    state: BoardState | None = None, *, nested: bool = False) -> Admission:
        """The admission of a call (its heals in order, its conditions, its flash slot);
        returning at all means allow (the runner records that on the call's own event). Raises
        Refused (with its decision) to stop the call. `state`: the board state as the caller
        just read it (read here otherwise). The call's budget slot was taken by admit().
        `nested`: a call inside a running one, which already holds the lease: it is not taken
        again (a nested call uses its parent's; taken only if the parent did not need it)."""
        self._inputs(spec, args)
        await self._hold_place(spec, nested)
        state = state or self.ctx.board.peek()
        self._health(spec, args, state)
        if "fingerprint_verified" in spec.requires and not state.fingerprint_ok():
            build = state.flashed_build or "the running build"
            raise refuse(spec.name, "fingerprint_unverified",
                         f"{build} was flashed but not verified since",
                         f"fingerprint_verify {{\"build_id\": \"{build}\"}} first")
        plan = await self._plan_heals(spec.name, spec.requires)
        if ("lease" in spec.requires or plan) and not (nested and self.lease.held):
            other = await self.lease.acquire()
            if other is not None:
                raise refuse(spec.name, "lease_held", f"the DUT is leased to {other.describe()}",
                             "wait for it to expire or ask the holder to end their session")
        admission = Admission()
        if spec.counts_as_flash:  # last: a refused call must not hold a slot
            why, admission.flash_token = self.flashes.reserve(self.session)
            if why is not None:
                raise refuse(spec.name, "budget_exceeded", why, flashrate.REMEDY)
        try:
            if plan:
                changes = await self._heal(spec.name, plan)
                healed = ", ".join(k.name for k in plan)
                admission.decisions.append(GuardDecision(
                    tool=spec.name, decision="heal", reason=f"healed before the call: {healed}",
                    changes=changes))
            admission.conditions = await self._conditions(state) if spec.measures else None
        except BaseException:
            self.release(admission)
            raise
        return admission

    def release(self, admission: Admission) -> None:
        """Give back what an admitted call took and did not use (its flash slot)."""
        if admission.flash_token is not None:
            self.flashes.release(admission.flash_token)
            admission.flash_token = None

    def after(self, spec: ToolSpec, ok: bool, result: dict[str, Any] | None,
              health_before: str, admission: Admission | None = None) -> GuardDecision | None:
        """A flash that failed gives its slot back; a failed health check turns an unknown board
        bad, a passed proof turns it good."""
        if admission is not None and not ok:
            self.release(admission)
        if health_before != "unknown" or spec.health not in ("restore", "prove"):
            return None
        proved = spec.health == "prove" and spec.proof_field is not None \
            and bool((result or {}).get(spec.proof_field))
        failed = not ok or (spec.health == "prove" and not proved)
        state = self.ctx.board.copy()
        if failed:
            state.board_health = "bad"
            state.health_reason = f"health check failed at {spec.name}"
            self.ctx.board.save(state)
            return GuardDecision(tool=spec.name, decision="refuse", code="board_bad",
                                 reason=state.health_reason, remedy="a person must clear it")
        if proved:
            state.board_health = "good"
            state.health_reason = None
            self.ctx.board.save(state)
        return None


__all__ = ["Guard", "GuardContext", "Refused"]
