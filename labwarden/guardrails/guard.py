"""The guard: checks each call against what the tool's spec declares and the profile's policy,
heals what the policy allows (then re-checks), and refuses the rest with a code, a reason and a
remedy. It never runs the tool's side effect, and it reads only the spec -- no tool names.

Order of a check: budgets, argument safety (identifiers, paths, suspects), board health,
fingerprint, knobs (read and judged; nothing changes yet), the lease (only when the call needs
it or a heal will change the DUT), then the heals, then -- for a measuring tool -- the conditions
it runs under.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labwarden.core.events import GuardDecision
from labwarden.core.spec import ToolSpec
from labwarden.guardrails import argsafety, paths, suspects
from labwarden.guardrails.budget import BudgetState
from labwarden.guardrails.context import GuardContext
from labwarden.guardrails.lease import Lease
from labwarden.guardrails.refusal import Refused, refuse
from labwarden.lab import knobs
from labwarden.lab.boardstate import BoardState


class Guard:
    def __init__(self, ctx: GuardContext, holder: str):
        self.ctx = ctx
        prof = ctx.profile
        self.budget = BudgetState(prof.policy.budgets)
        self.lease = Lease(ctx.device, prof.dut.paths.run, holder, prof.policy.lease_ttl_s)
        self.last_conditions: dict[str, Any] | None = None

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
                    roots = [Path(d) for d in prof.build.patches_dirs] + \
                        [self.ctx.board.data_dir / "patches"]
                    try:
                        paths.contained(item, roots)
                    except paths.PathRefused as exc:
                        raise refuse(spec.name, "unsafe_path", str(exc),
                                     "use a patch id from the lab's patch directories") from None
        name = args.get(spec.suspect_arg) if spec.suspect_arg else None
        if isinstance(name, str) and (why := suspects.problem(prof.target, name)) is not None:
            raise refuse(spec.name, "suspect_not_allowed", why, suspects.REMEDY)

    # -- board health ------------------------------------------------------------------------
    def _health(self, spec: ToolSpec, args: dict[str, Any], state: BoardState) -> None:
        if state.board_health == "bad" and spec.health != "observe":
            raise refuse(spec.name, "board_bad", f"the board is bad: {state.health_reason}",
                         "a person must inspect it, then `labwarden lab clear-bad`")
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
    async def _plan_heals(self, spec: ToolSpec) -> list[knobs.Knob]:
        """Read and judge every knob the tool's requirements depend on; refuse what policy may not
        heal. Nothing on the DUT changes here: heals run only after the lease is held."""
        if not spec.requires:  # no knob serves no requirement: nothing to bind or read
            return []
        heal = set(self.ctx.profile.policy.heal)
        plan: list[knobs.Knob] = []
        for knob in knobs.pinned(self.ctx.device, self.ctx.profile):
            if knob.requirement not in spec.requires:
                continue
            state = await knob.state()  # a knob the DUT lacks is not applicable: ok, no heal
            if state.ok:
                continue
            if knob.name not in heal:
                raise refuse(spec.name, knob.refusal, knob.refusal_reason(state), knob.remedy)
            plan.append(knob)
        return plan

    async def _heal(self, spec: ToolSpec, plan: list[knobs.Knob]) -> list[str]:
        changes: list[str] = []
        for knob in plan:
            changes += await knob.pin()
            again = await knob.state()
            if not again.ok:
                raise refuse(spec.name, knob.refusal, f"{knob.name} still {again.value} after healing",
                             "check the paths and [topology] in the lab profile")
        return changes

    async def _conditions(self, state: BoardState) -> dict[str, Any]:
        """What a measuring call runs under (stored on its transcript event)."""
        dev, prof = self.ctx.device, self.ctx.profile
        gov, boost = knobs.Governor(dev, prof), knobs.Boost(dev, prof)
        gov_missing = await gov.available()
        boost_state = await boost.state()
        na = {"governor": gov_missing} if gov_missing else {}
        if not boost_state.applicable:  # recorded as not applicable, never as "off"
            na["boost"] = boost_state.value.removeprefix("n/a: ")
        return {"fingerprint_verified": state.fingerprint_ok(),
                "governors": await gov.governors() if gov_missing is None else [],
                "boost": boost_state.value, "not_applicable": na}

    # -- the check -------------------------------------------------------------------------
    async def check(self, spec: ToolSpec, args: dict[str, Any],
                    state: BoardState | None = None) -> list[GuardDecision]:
        """The heal decisions it carried out, in order; returning at all means allow (the runner
        records that on the call's own event). Raises Refused (with its decision) to stop the
        call. `state`: the board state as the caller just read it (read here otherwise)."""
        over = self.budget.exceeded(spec)
        if over:
            raise refuse(spec.name, "budget_exceeded", over, "start a new session with a larger budget")
        self._inputs(spec, args)
        state = state or self.ctx.board.peek()
        self._health(spec, args, state)
        if "fingerprint_verified" in spec.requires and not state.fingerprint_ok():
            build = state.flashed_build or "the running build"
            raise refuse(spec.name, "fingerprint_unverified",
                         f"{build} was flashed but not verified since",
                         f"fingerprint_verify {{\"build_id\": \"{build}\"}} first")
        plan = await self._plan_heals(spec)
        if "lease" in spec.requires or plan:
            other = await self.lease.acquire()
            if other is not None:
                raise refuse(spec.name, "lease_held", f"the DUT is leased to {other.describe()}",
                             "wait for it to expire or ask the holder to end their session")
        decisions: list[GuardDecision] = []
        if plan:
            changes = await self._heal(spec, plan)
            healed = ", ".join(k.name for k in plan)
            decisions.append(GuardDecision(tool=spec.name, decision="heal",
                                           reason=f"healed before the call: {healed}", changes=changes))
        self.last_conditions = await self._conditions(state) if spec.measures else None
        self.budget.tool_calls += 1
        return decisions

    def after(self, spec: ToolSpec, ok: bool, result: dict[str, Any] | None,
              health_before: str) -> GuardDecision | None:
        """Count the call against the budgets; a failed health check turns an unknown board bad,
        a passed proof turns it good."""
        self.budget.took(spec, ok)
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
