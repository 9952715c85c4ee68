"""The guard: checks each call against the tool's declared requirements and the profile's
policy, heals what the policy allows (then re-checks), and refuses the rest with a code, a
reason and a remedy. It never runs the tool's side effect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labwarden.core.events import GuardDecision
from labwarden.core.spec import ToolSpec
from labwarden.guardrails import argsafety, paths
from labwarden.guardrails.budget import BudgetState
from labwarden.guardrails.lease import Lease
from labwarden.guardrails.refusal import Refused, refuse
from labwarden.lab import knobs
from labwarden.lab.boardstate import LabState

FORBIDDEN_SUSPECTS = {"init", "procd", "systemd", "sshd", "dropbear", "lw-pause", "python", "python3",
                      "labwarden", "ubusd", "netifd"}
"""Never paused, whatever a profile says: the DUT's init and SSH, and our own helpers."""
HEALTH_CHECK_TOOLS = {"lab_status", "fingerprint_verify", "flash"}
MEASURING = {"profile", "sweep", "attribute"}


async def _judged_topology(dev: Any, prof: Any) -> knobs.KnobState:
    return knobs.judge_topology(await knobs.topology(dev, prof), prof)


class Guard:
    def __init__(self, ctx: Any, holder: str):  # ctx: LabContext (import cycle otherwise)
        self.ctx = ctx
        self.budget = BudgetState(ctx.profile.policy.budgets)
        self.lease = Lease(ctx.device, ctx.profile.dut.paths.run, holder, ctx.profile.policy.lease_ttl_s)
        self.last_conditions: dict[str, Any] | None = None

    # -- input safety ----------------------------------------------------------------------
    def _inputs(self, spec: ToolSpec, args: dict[str, Any]) -> None:
        checked = {k: v for k, v in args.items() if k not in spec.free_text}
        bad = argsafety.problems(checked)
        if bad:
            raise refuse(spec.name, "unsafe_argument", "; ".join(bad[:3]),
                         "pass plain identifiers; arguments are data, never shell text")
        for item in args.get("patches", []) or []:
            if isinstance(item, str) and "/" in item:
                prof = self.ctx.profile
                roots = [Path(d) for d in prof.build.patches_dirs] + [self.ctx.data_dir / "patches"]
                try:
                    paths.contained(item, roots)
                except paths.PathRefused as exc:
                    raise refuse(spec.name, "unsafe_path", str(exc),
                                 "submit the patch with patch_submit, or use a patch id") from None
        suspect = args.get("suspect")
        if isinstance(suspect, str):
            t = self.ctx.profile.target
            if suspect in FORBIDDEN_SUSPECTS or suspect == t.process or suspect not in t.suspects:
                allow = ", ".join(t.suspects) or "empty"
                raise refuse(spec.name, "suspect_not_allowed",
                             f"{suspect!r} may not be stopped (allowlist: {allow})",
                             "name a suspect from [target] suspects in the lab profile")

    # -- state ---------------------------------------------------------------------------------
    def _health(self, spec: ToolSpec, args: dict[str, Any], state: LabState) -> None:
        if state.board_health == "bad" and spec.name != "lab_status":
            raise refuse(spec.name, "board_bad", f"the board is bad: {state.health_reason}",
                         "a person must inspect it, then `labwarden lab clear-bad`")
        if state.board_health == "unknown":
            known = {self.ctx.profile.build.baseline, state.verified_build} - {None}
            unknown_image = spec.name == "flash" and args.get("build_id") not in known
            if spec.name not in HEALTH_CHECK_TOOLS or unknown_image:
                images = ", ".join(sorted(k for k in known if k)) or "the baseline"
                raise refuse(spec.name, "board_unknown", f"the board is unknown: {state.health_reason}",
                             f"run a health check: flash a known image ({images}), then "
                             "fingerprint_verify it")

    async def _plan_heals(self, spec: ToolSpec) -> list[tuple[str, Any, Any]]:
        """Read and judge every knob the tool needs; refuse what policy may not heal. Nothing
        on the DUT changes here: heals run only after the lease is held."""
        prof, dev = self.ctx.profile, self.ctx.device
        heal = set(prof.policy.heal)
        plan: list[tuple[str, Any, Any]] = []
        if "env_pinned" in spec.requires:
            for name, read, apply in (("governor", knobs.governor, knobs.pin_governor),
                                      ("boost", knobs.boost, knobs.pin_boost)):
                state = await read(dev, prof)
                if state.ok:
                    continue
                if name not in heal:
                    raise refuse(spec.name, "env_unpinned", f"{name} is {state.value}: {state.advice}",
                                 f"allow healing ([policy] heal = [\"{name}\", ...]) or pin it (env_pin)")
                plan.append((name, apply, read))
        if "topology_asserted" in spec.requires:
            pm = await knobs.procmgr(dev, prof)
            if not pm.ok:
                if "procmgr" not in heal:
                    raise refuse(spec.name, "topology_drifted", f"process manager {pm.value}",
                                 "allow healing (\"procmgr\") or turn it on")
                plan.append(("procmgr", knobs.pin_procmgr, knobs.procmgr))
            topo = knobs.judge_topology(await knobs.topology(dev, prof), prof)
            if not topo.ok:
                if "topology" not in heal:
                    raise refuse(spec.name, "topology_drifted", topo.value,
                                 "allow healing (\"topology\") or re-enable the VAPs and pin channels")
                plan.append(("topology", knobs.pin_topology, _judged_topology))
        return plan

    async def _heal(self, spec: ToolSpec, plan: list[tuple[str, Any, Any]]) -> list[str]:
        prof, dev = self.ctx.profile, self.ctx.device
        changes: list[str] = []
        for name, apply, read in plan:
            changes += await apply(dev, prof)
            again = await read(dev, prof)
            if not again.ok:
                raise refuse(spec.name, "topology_drifted" if name in ("topology", "procmgr")
                             else "env_unpinned", f"{name} still {again.value} after healing",
                             "check the paths and [topology] in the lab profile")
        return changes

    async def check(self, spec: ToolSpec, args: dict[str, Any],
                    state: LabState | None = None) -> list[GuardDecision]:
        """The heal decisions it carried out, in order; returning at all means allow (the runner
        records that on the call's own event). Raises Refused (with its decision) to stop the
        call. `state`: the lab state as the caller just read it (read here otherwise)."""
        over = self.budget.exceeded(spec.name)
        if over:
            raise refuse(spec.name, "budget_exceeded", over, "start a new session with a larger budget")
        self._inputs(spec, args)
        state = state or self.ctx.peek_state()
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
            decisions.append(GuardDecision(tool=spec.name, decision="heal",
                                           reason="healed before the call: " + ", ".join(p[0] for p in plan),
                                           changes=changes))
        if spec.name in MEASURING:
            prof, dev = self.ctx.profile, self.ctx.device
            self.last_conditions = {"fingerprint_verified": state.fingerprint_ok(),
                                    "governors": await knobs.read_governors(dev, prof),
                                    "boost": (await knobs.boost(dev, prof)).value}
        else:
            self.last_conditions = None
        self.budget.tool_calls += 1
        return decisions

    def after(self, spec: ToolSpec, args: dict[str, Any], ok: bool, result: dict[str, Any] | None,
              health_before: str) -> GuardDecision | None:
        """A failed health check turns an unknown board bad."""
        import time

        if spec.name == "flash" and ok:
            self.budget.flashes.append(time.monotonic())
        if health_before != "unknown" or spec.name not in ("flash", "fingerprint_verify"):
            return None
        failed = not ok or (spec.name == "fingerprint_verify" and not (result or {}).get("verified"))
        state = self.ctx.state
        if failed:
            state.board_health = "bad"
            state.health_reason = f"health check failed at {spec.name}"
            self.ctx.save_state(state)
            return GuardDecision(tool=spec.name, decision="refuse", code="board_bad",
                                 reason=state.health_reason, remedy="a person must clear it")
        if spec.name == "fingerprint_verify":
            state.board_health = "good"
            state.health_reason = None
            self.ctx.save_state(state)
        return None


__all__ = ["Guard", "Refused"]
