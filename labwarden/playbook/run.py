"""Run a playbook: each step through the runner (guard + transcript), results kept for later
steps' references, expectations checked, and a run record saved beside the lab's records."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from labwarden.core.call import ToolCallRecord, ToolFailure
from labwarden.core.records import RecordStore
from labwarden.playbook import refs
from labwarden.playbook.model import Playbook, Step
from labwarden.runtime.runner import call_tool
from labwarden.tools.context import LabContext


class StepResult(BaseModel):
    id: str
    tool: str
    title: str | None
    record: ToolCallRecord
    expectations: list[str] = Field(default_factory=list, description="unmet expectations")


class RunRecord(BaseModel):
    id: str
    playbook: str
    started_at: datetime
    session_id: str | None
    steps: list[StepResult]
    stopped_at: str | None = Field(None, description="step id that failed and stopped the run")
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.stopped_at is None


StepHook = Callable[[int, Step, ToolCallRecord | None], Awaitable[None]]


def _check(expect: dict[str, Any], result: dict[str, Any] | None) -> list[str]:
    unmet = []
    for path, want in expect.items():
        try:
            got = refs.lookup(result or {}, path)
        except refs.RefError:
            got = "(absent)"
        if got != want:
            unmet.append(f"{path}: expected {want!r}, got {got!r}")
    return unmet


async def run(ctx: LabContext, book: Playbook, on_step: StepHook | None = None) -> RunRecord:
    store = RecordStore(ctx.data_dir)
    record = RunRecord(id=store.new_id("run"), playbook=book.name, started_at=datetime.now(UTC),
                       session_id=ctx.session_id, steps=[])
    scope: dict[str, Any] = {"vars": book.vars, "lab": {"baseline": ctx.profile.build.baseline}}
    t0 = time.monotonic()
    for i, step in enumerate(book.steps):
        if on_step:
            await on_step(i, step, None)
        try:
            args = refs.resolve(step.args, scope)
        except refs.RefError as exc:
            rec = ToolCallRecord(tool=step.tool, args=step.args, error=ToolFailure.of(exc))
        else:
            rec = await call_tool(ctx, step.tool, args)
        result = StepResult(id=step.id, tool=step.tool, title=step.title, record=rec,
                            expectations=_check(step.expect, rec.result) if rec.ok else [])
        record.steps.append(result)
        scope[step.id] = rec.result if rec.ok else {}
        if on_step:
            await on_step(i, step, rec)
        if not rec.ok and not step.continue_on_error:
            record.stopped_at = step.id
            break
    record.duration_s = round(time.monotonic() - t0, 2)
    store.save("run", record.id, record)
    return record
