"""Call a registered tool by name with JSON-like args: validate, guard, run, time, record, log.

This is the single path for every door (Python, CLI, MCP, playbooks): the guard and the
transcript attach here, so nobody has to remember to check or log.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from labwarden.core.call import ToolCallRecord, ToolFailure
from labwarden.core.devtext import clean, untrusted_fields
from labwarden.core.errors import LabError
from labwarden.core.events import GuardDecision
from labwarden.guardrails.refusal import Refused
from labwarden.lab.dut.errors import DeviceError
from labwarden.tools import registry
from labwarden.tools.context import LabContext


def _invalid(exc: ValidationError) -> ToolFailure:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        problems.append(f"{key}: {err['msg']}")
    return ToolFailure(kind="invalid_input", code="invalid_input", message="; ".join(problems),
                       remedy="see the tool's input schema (`labwarden call TOOL --help`)")


def _decision_event(d: GuardDecision) -> Any:
    return d


def _call_event(record: ToolCallRecord, conditions: dict[str, Any] | None,
                allowed: bool = False) -> Any:
    from labwarden.core import events

    # compact JSON of what the client gets (the MCP server sends exactly this text)
    shown = record.output if record.ok else record.error
    record.result_json = shown.model_dump_json() if shown is not None else "null"
    return events.ToolCalled.of(record, result_json=record.result_json, conditions=conditions,
                                guard="allow" if allowed else None)


CHANGES_DUT = frozenset({"mutates_dut", "destructive"})
"""Effects whose transcript commit waits for fsync before the call returns. The others (reads,
host-only work, refusals) are committed without it: they survive kill -9, and the next durable
commit puts them on disk too (transcripts/store.py)."""


def _refused(ctx: LabContext, record: ToolCallRecord, d: GuardDecision) -> ToolCallRecord:
    record.error = ToolFailure(kind="refused" if d.code != "invalid_input" else "invalid_input",
                               code=d.code, message=d.reason, remedy=d.remedy)
    ctx.log(_decision_event(d), _call_event(record, None), durable=False)  # nothing ran
    return record


async def call_tool(ctx: LabContext, name: str, args: dict[str, Any]) -> ToolCallRecord:
    started = datetime.now(UTC)

    def unrun(call_args: dict[str, Any]) -> ToolCallRecord:  # a call that stops before the tool
        return ToolCallRecord(tool=name, args=call_args, started_at=started)

    try:
        spec = registry.get(name)
    except KeyError as exc:
        return _refused(ctx, unrun(args), GuardDecision(
            tool=name, decision="refuse", code="tool_unknown", reason=str(exc.args[0]),
            remedy="call one of the listed tools"))
    try:
        inp = spec.input.model_validate(args)
    except ValidationError as exc:
        failure = _invalid(exc)
        return _refused(ctx, unrun(args), GuardDecision(
            tool=name, decision="refuse", code="invalid_input", reason=failure.message,
            remedy=failure.remedy))
    call_args = inp.model_dump(mode="json")  # what the guard judges and the tool runs with
    conditions = None
    state = ctx.peek_state()  # one read per call, shared with the guard
    health_before = state.board_health
    if ctx.guard is not None:
        try:
            decisions = await ctx.guard.check(spec, call_args, state)
        except Refused as exc:
            return _refused(ctx, unrun(call_args), exc.decision)
        except DeviceError as exc:  # the guard could not read or lease the DUT: nothing ran
            record = unrun(call_args)
            record.error = ToolFailure(kind="device", message=clean(exc.problem), remedy=exc.remedy)
            ctx.log(_call_event(record, None), durable=False)
            return record
        # A heal changed the DUT: committed (durably) now, before the tool runs. The allow
        # that follows is recorded on the call's own event (ToolCalled.guard): one row, one
        # commit per call.
        if decisions:
            ctx.log(*(_decision_event(d) for d in decisions))
        conditions = ctx.guard.last_conditions
    t0 = time.monotonic()
    mark = len(ctx.messages)
    # the outcome is gathered in locals and the record built once at the end: each assignment
    # to a pydantic field costs as much as a small model, and this runs on every call
    out: Any = None
    result: dict[str, Any] | None = None
    error: ToolFailure | None = None
    try:
        out = await spec.run(ctx, inp)
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
        ok = result is not None and error is None
        if error is not None:  # errors often quote device stderr
            error.message = clean(error.message)
            error.lines = [clean(ln, 300) for ln in error.lines[:40]]
        record = ToolCallRecord(tool=name, args=call_args, started_at=started,
                                duration_s=round(time.monotonic() - t0, 4), ok=ok,
                                result=result if ok else None, error=error,
                                progress=ctx.messages[mark:],
                                untrusted=untrusted_fields(spec.output) if ok else [],
                                output=out if ok else None)
        after = (ctx.guard.after(spec, call_args, ok, record.result, health_before)
                 if ctx.guard is not None else None)
        events = [_call_event(record, conditions, allowed=ctx.guard is not None)]
        if after is not None:  # the board turned bad: recorded after the call that did it
            events.append(_decision_event(after))
        # a call that changed the DUT, or turned the board bad, must survive a power cut too
        ctx.log(*events, durable=spec.effect in CHANGES_DUT or after is not None)
    return record
