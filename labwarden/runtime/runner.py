"""Call a registered tool by name with JSON-like args: validate, guard, run, time, record, log.

This is the single path for every door (Python, CLI, MCP, playbooks, the agent): the guard and
the transcript attach here, so nobody has to remember to check or log. What happens to a call
follows from its spec alone (core/spec.py).

Nested calls -- a tool asking `ctx.call` for another tool's effect (an experiment's flashes,
verifications, windows) -- come through here too (`RunnerDoor`), and differ from a client's call
in three ways only, each because the parent already paid for it:
- it is not admitted again: no slot of the session's `tool_calls` budget (that bounds the
  client's decisions; an experiment's dozens of steps would exhaust it), and every nested flash
  still takes its own `flashes_per_hour` slot (guard.check);
- the parent's lease: not taken again, not renewed twice (the parent's renewal runs);
- the parent's wall-time deadline: no second one (the parent's stops the whole tree).
Everything else is the same: requirements, heals (guard decisions), board health, the
conditions of a measurement, and a ToolCalled event of its own whose `parent_id` is the
parent's `call.id` (it is written when the child ends, before its parent's).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast, get_args

from pydantic import ValidationError
from pydantic_core import to_json

from labwarden.core.call import ToolCallRecord, ToolFailure
from labwarden.core.conditions import CallConditions
from labwarden.core.devtext import clean, untrusted_fields
from labwarden.core.digest import bounded_args, bounded_name
from labwarden.core.errors import LabError
from labwarden.core.events import GuardDecision, RefusalCode, ToolCalled
from labwarden.core.ids import random_hex
from labwarden.core.nesting import clipped, too_deep
from labwarden.core.spec import Requirement, ToolSpec
from labwarden.guardrails import budget as budgets
from labwarden.guardrails.guard import Admission, Guard
from labwarden.guardrails.refusal import Refused
from labwarden.lab import features
from labwarden.runtime import request_mark
from labwarden.runtime.leasekeeper import lease_renewal, renews
from labwarden.tools import registry
from labwarden.tools.context import LabContext, current_messages, heal_unguarded


@dataclass(frozen=True)
class _Running:
    """The call whose tool runs in this task: the parent of any call it asks for."""

    ctx: LabContext
    call_id: str
    spec: ToolSpec


_running: ContextVar[_Running | None] = ContextVar("labwarden_running_call", default=None)


def _same_session(running: LabContext, ctx: LabContext) -> bool:
    """Whether a call on `ctx` runs inside the call running on `running`: the same context, or
    a fleet place session of the same transcript session (an experiment reproduced on another
    place: its flashes and windows there are still the experiment's nested calls)."""
    return running is ctx or (ctx.place_name is not None and ctx.session_id is not None
                              and running.session_id == ctx.session_id
                              and running.transcript is ctx.transcript)


_REFUSAL_CODES: frozenset[str] = frozenset(get_args(RefusalCode))


def _refusal_code(code: str | None) -> RefusalCode:
    """A precheck failure's code as the guard's: its own when it is one, else invalid_input (a
    LabError's code may be another, e.g. protected_path, that no GuardDecision may carry)."""
    return cast(RefusalCode, code) if code in _REFUSAL_CODES else "invalid_input"


def _invalid(exc: ValidationError) -> ToolFailure:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        problems.append(f"{key}: {err['msg']}")
    return ToolFailure(kind="invalid_input", code="invalid_input", message="; ".join(problems),
                       remedy="see the tool's input schema (`labwarden call TOOL --help`)")


def _call_event(record: ToolCallRecord, conditions: CallConditions | None, *,
                allowed: bool = False, measured: bool = False,
                parent_id: str | None = None) -> ToolCalled:
    # compact JSON of what the client gets (the MCP server sends exactly this text): a
    # result's from the dict already dumped (its structured content), not the model again
    if record.ok:
        record.result_json = to_json(record.result).decode()
    else:
        record.result_json = record.error.model_dump_json() if record.error is not None else "null"
    return ToolCalled.of(record, result_json=record.result_json, conditions=conditions,
                         guard="allow" if allowed else None, measured=measured and record.ok,
                         parent_id=parent_id)


CHANGES_DUT = frozenset({"mutates_dut", "destructive"})
"""Effects whose transcript commit waits for fsync before the call returns. The others (reads,
host-only work, refusals) are committed without it: they survive kill -9, and the next durable
commit puts them on disk too (transcripts/store.py)."""


def _refused(ctx: LabContext, record: ToolCallRecord, d: GuardDecision,
             parent_id: str | None = None) -> ToolCallRecord:
    record.error = ToolFailure(kind="refused" if d.code != "invalid_input" else "invalid_input",
                               code=d.code, message=d.reason, remedy=d.remedy)
    d.parent_id = parent_id
    ctx.log(d, _call_event(record, None, parent_id=parent_id), durable=False)  # nothing ran
    request_mark.logged()
    return record


def _guard(ctx: LabContext) -> Guard | None:
    guard = getattr(ctx, "guard", None)  # a LabSession's; a bare LabContext has none
    return guard if isinstance(guard, Guard) else None


def refuse_at_door(ctx: LabContext, name: str, args: Any, reason: str,
                   remedy: str = "send one JSON object of arguments, as the tool's input schema "
                   "says (`labwarden call TOOL --help`)") -> ToolCallRecord:
    """Log (and count against the budget) a call that failed before it could reach call_tool:
    arguments that are not a JSON object, a request the MCP SDK's own validation refused. The
    same two events as any refusal; the arguments stored bounded (core/digest.py)."""
    guard = _guard(ctx)
    if guard is not None:
        with contextlib.suppress(Refused):  # already spent: still logged, as invalid input
            guard.admit(name)
    if too_deep(args) is not None:  # stored cut: a serializer would recurse into it
        args = clipped(args)
    record = ToolCallRecord(tool=bounded_name(name), args=bounded_args(args))
    return _refused(ctx, record, GuardDecision(tool=record.tool, decision="refuse",
                                               code="invalid_input", reason=reason, remedy=remedy))


def _timed_out(name: str, guard: Guard) -> ToolFailure:
    limit = guard.budget.limits.wall_time_s
    return ToolFailure(kind="timeout", code="budget_exceeded",
                       message=f"wall time: the session's {limit:g} s ran out while {name} ran; "
                       "it was stopped and its clean-up ran", remedy=budgets.REMEDY)


async def call_tool(ctx: LabContext, name: str, args: dict[str, Any]) -> ToolCallRecord:
    """Run one call through the door every caller shares; never raises for a failed call (the
    record says what failed), only for a cancellation."""
    started = datetime.now(UTC)
    guard = _guard(ctx)
    call_id = random_hex(6)
    parent = _running.get()
    parent_id = parent.call_id if parent is not None and _same_session(parent.ctx, ctx) else None
    nested = parent_id is not None

    def unrun(call_args: Any) -> ToolCallRecord:  # a call that stops before the tool
        return ToolCallRecord(id=call_id, tool=bounded_name(name), args=bounded_args(call_args),
                              started_at=started)

    def refused(record: ToolCallRecord, d: GuardDecision) -> ToolCallRecord:
        return _refused(ctx, record, d, parent_id)

    # nested past the limit: refused before anything decodes, validates or stores it whole
    # (every door cut deeper JSON before decoding it: core/nesting.py); recorded cut
    deep = too_deep(args)
    if deep is not None:
        args = clipped(args)
    if guard is not None:  # the call's budget slot, first: refused and malformed calls count
        try:
            guard.admit(bounded_name(name), nested=nested)
        except Refused as exc:
            return refused(unrun(args), exc.decision)
    if deep is not None:
        return refused(unrun(args), GuardDecision(
            tool=bounded_name(name), decision="refuse", code="too_deep", reason=deep.reason(),
            remedy=deep.remedy()))
    spec: ToolSpec | None = registry.TOOLS.get(name)
    if spec is None:
        shown = bounded_name(name)
        return refused(unrun(args), GuardDecision(
            tool=shown, decision="refuse", code="tool_unknown",
            reason=f"unknown tool {shown!r}; tools: {', '.join(sorted(registry.TOOLS))}",
            remedy="call one of the listed tools"))
    why = features.not_applicable(spec, ctx.profile) if spec.needs else None
    if why is not None:
        return refused(unrun(args), GuardDecision(
            tool=name, decision="refuse", code="not_applicable",
            reason=f"{name} does not apply to this lab: {why}",
            remedy="use the tools this lab lists (`lab_status` says what the lab is); a tool "
            "appears once the lab profile gives what it needs"))
    try:
        inp = spec.input.model_validate(args)
    except ValidationError as exc:
        failure = _invalid(exc)
        return refused(unrun(args), GuardDecision(
            tool=name, decision="refuse", code="invalid_input", reason=failure.message,
            remedy=failure.remedy))
    call_args = inp.model_dump(mode="json")  # what the guard judges and the tool runs with
    if spec.precheck is not None:  # what the arguments name exists: before any guard side effect
        try:
            spec.precheck(ctx, inp)
        except LabError as exc:
            failure = ToolFailure.of(exc)
            return refused(unrun(call_args), GuardDecision(
                tool=name, decision="refuse", code=_refusal_code(exc.code),
                reason=clean(failure.message), remedy=failure.remedy))
    conditions = None
    state = ctx.peek_state()  # one read per call, shared with the guard
    health_before = state.board_health
    admission: Admission | None = None
    leased_before = guard is not None and guard.lease.held
    if guard is not None:
        try:
            admission = await guard.check(spec, call_args, state, nested=nested)
        except Refused as exc:
            return refused(unrun(call_args), exc.decision)
        except LabError as exc:  # the guard could not read or lease the DUT: nothing ran
            record = unrun(call_args)
            record.error = ToolFailure.of(exc)
            record.error.message = clean(record.error.message)
            ctx.log(_call_event(record, None, parent_id=parent_id), durable=False)
            request_mark.logged()
            return record
        # A heal changed the DUT: committed (durably) now, before the tool runs. The allow
        # that follows is recorded on the call's own event (ToolCalled.guard): one row, one
        # commit per call.
        for d in admission.decisions:
            d.parent_id = parent_id
        if admission.decisions:
            ctx.log(*admission.decisions)
        conditions = admission.conditions
    t0 = time.monotonic()
    messages: list[str] = []
    messages_token = current_messages.set(messages)  # this call's progress, for its record
    running_token = _running.set(_Running(ctx, call_id, spec))  # the parent of its nested calls
    # the outcome is gathered in locals and the record built once at the end: each assignment
    # to a pydantic field costs as much as a small model, and this runs on every call
    out: Any = None
    result: dict[str, Any] | None = None
    error: ToolFailure | None = None
    # a nested call runs inside its parent's deadline and its parent's lease renewal
    left = guard.budget.time_left() if guard is not None and not nested else None
    # (a call that keeps no lease skips the renewal's generator: most calls, on every call)
    renewal = lease_renewal(guard, spec) if guard is not None and not (nested and leased_before) \
        and renews(guard, spec) else contextlib.nullcontext()
    try:
        async with renewal:
            if left is None:
                out = await spec.run(ctx, inp)
            else:  # the wall-time budget stops a call that would cross it (cancelled cleanly)
                deadline = asyncio.timeout(left)
                try:
                    async with deadline:
                        out = await spec.run(ctx, inp)
                except (TimeoutError, LabError):  # a tool may turn its cancellation into an error
                    if not deadline.expired():
                        raise
                    assert guard is not None
                    error = _timed_out(name, guard)
                    await ctx.settle()  # its shielded clean-ups finish before the call returns
        if error is None:
            result = out.model_dump(mode="json")
    except LabError as exc:  # every problem/remedy failure: its kind travels with it
        error = ToolFailure.of(exc)
    except BaseException as exc:
        if isinstance(exc, Exception):  # a bug in the tool: recorded as one, then raised
            error = ToolFailure(kind="internal", message=f"{name} failed: {type(exc).__name__}: {exc}")
        else:  # cancelled (the client gave up) or interrupted
            error = ToolFailure(kind="cancelled", message=f"{name} was cancelled; its cleanup ran")
        raise
    finally:
        _running.reset(running_token)
        ok = result is not None and error is None
        if error is not None:  # errors quote device stderr (marked at the source); clean anyway
            error.message = clean(error.message)
            error.lines = [clean(ln, 300) for ln in error.lines[:40]]
        record = ToolCallRecord(id=call_id, tool=name, args=bounded_args(call_args),
                                started_at=started,
                                duration_s=round(time.monotonic() - t0, 4), ok=ok,
                                result=result if ok else None, error=error,
                                progress=messages,
                                untrusted=untrusted_fields(spec.output) if ok else [],
                                output=out if ok else None)
        after = guard.after(spec, ok, record.result, health_before, admission) \
            if guard is not None else None
        events: list[Any] = [_call_event(record, conditions, allowed=guard is not None,
                                         measured=spec.measures, parent_id=parent_id)]
        if after is not None:  # the board turned bad: recorded after the call that did it
            events.append(after)
        # a call that changed the DUT, or turned the board bad, must survive a power cut too
        ctx.log(*events, durable=spec.effect in CHANGES_DUT or after is not None)
        request_mark.logged()
        current_messages.reset(messages_token)
    return record


PINNED: frozenset[Requirement] = frozenset({"env_pinned", "topology_asserted"})


class RunnerDoor:
    """The session's door for nested work (tools/context.py `Door`): `ctx.call` and `ctx.heal`
    of a running tool go through the runner and its guard."""

    async def call(self, ctx: LabContext, name: str, args: dict[str, Any]) -> ToolCallRecord:
        return await call_tool(ctx, name, args)

    async def heal(self, ctx: LabContext, requires: frozenset[Requirement] | None) -> list[str]:
        """Heal what drifted while a call ran, as `requires` (default: the running call's
        requirements; all pinned knobs outside a call) needs: a guard decision under that call,
        or its refusal, logged and raised."""
        guard = _guard(ctx)
        if guard is None:
            return await heal_unguarded(ctx, requires)
        frame = _running.get()
        mine = frame if frame is not None and _same_session(frame.ctx, ctx) else None
        tool = mine.spec.name if mine is not None else "heal"
        if requires is None:
            requires = mine.spec.requires if mine is not None else PINNED
        try:
            decision = await guard.heal_drift(tool, requires, f"while {tool} ran")
        except Refused as exc:
            exc.decision.parent_id = mine.call_id if mine is not None else None
            ctx.log(exc.decision, durable=False)
            raise
        if decision is None:
            return []
        decision.parent_id = mine.call_id if mine is not None else None
        ctx.log(decision)  # the DUT changed: durable before the call goes on
        return decision.changes


RUNNER_DOOR = RunnerDoor()
