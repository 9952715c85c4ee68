"""A session as a timeline: one row per event plus totals. Replay (rich) and export (HTML) both
render this, so the terminal and the file show the same thing. A tool's nested calls (and the
guard decisions under it) follow it, one level deeper (transcripts/calltree.py)."""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

from labwarden.core.events import (
    GuardDecision,
    ModelCall,
    Note,
    RequestRefused,
    RequestServed,
    ResourceRead,
    SessionEnded,
    SessionStarted,
    ToolCalled,
)
from labwarden.transcripts import calltree
from labwarden.transcripts.pricing import KINDS, tokens_by_kind
from labwarden.transcripts.store import StoredEvent, TranscriptStore

ARGS_CHARS = 80


class Row(BaseModel):
    seq: int
    offset_s: float
    """Seconds since the session's first event."""
    kind: str
    what: str
    """Tool, guard decision, model, note author, client."""
    detail: str = ""
    """Arguments, reason, note text, ..."""
    status: str = ""
    """ok / error kind / allow / refuse / heal / stop reason."""
    duration_s: float | None = None
    tokens: str = ""
    """Model tokens by kind, or the estimated tokens of a tool result."""
    cost_usd: float | None = None
    artifacts: list[str] = Field(default_factory=list)
    hash: str = ""
    depth: int = 0
    """0: a client's call (or any other event); 1: a call (or guard decision) under one; ..."""


class Totals(BaseModel):
    events: int = 0
    tool_calls: int = 0
    nested_calls: int = 0
    """Of tool_calls, those a tool made (its `ctx.call`), not the client."""
    tool_errors: int = 0
    guard: dict[str, int] = Field(default_factory=dict)
    """Guard decisions by decision."""
    tool_seconds: float = 0.0
    result_tokens_est: int = 0
    """What the agent paid (estimated) to read tool results."""
    model_calls: int = 0
    tokens: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    """Model tokens by usage kind."""
    cost_usd: float = 0.0


class Timeline(BaseModel):
    session_id: str
    header: dict[str, str]
    rows: list[Row]
    totals: Totals


def _short(value: object, n: int = ARGS_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= n else text[: n - 1] + "…"


def _row(s: StoredEvent, t0: float, tot: Totals, depth: int = 0) -> Row:
    ev = s.event
    row = Row(seq=s.seq, offset_s=ev.ts.timestamp() - t0, kind=ev.kind, what="", hash=s.hash[:12],
              depth=depth)
    if isinstance(ev, ToolCalled):
        c = ev.call
        tot.tool_calls += 1
        tot.nested_calls += 1 if ev.parent_id is not None else 0
        tot.tool_errors += 0 if c.ok else 1
        tot.tool_seconds += c.duration_s
        tot.result_tokens_est += ev.result_tokens_est
        if ev.guard:  # a plain allow is recorded on the call itself
            tot.guard[ev.guard] = tot.guard.get(ev.guard, 0) + 1
        row.what, row.detail, row.duration_s = c.tool, _short(c.args), c.duration_s
        row.status = "ok" if c.ok else f"error: {c.error.kind if c.error else '?'}"
        if c.error:
            row.detail += f" -> {_short(c.error.message)}"
        row.tokens, row.artifacts = f"~{ev.result_tokens_est} tok result", list(c.artifacts)
    elif isinstance(ev, GuardDecision):
        tot.guard[ev.decision] = tot.guard.get(ev.decision, 0) + 1
        row.what, row.status = ev.tool, ev.decision
        row.detail = (f"{ev.code}: " if ev.code else "") + ev.reason
        row.detail += "".join(f"; changed {c}" for c in ev.changes)
        row.detail += f"; remedy: {ev.remedy}" if ev.remedy else ""
    elif isinstance(ev, ModelCall):
        tokens = tokens_by_kind(ev.usage)
        tot.model_calls += 1
        tot.cost_usd += ev.cost_usd
        for k, n in tokens.items():
            tot.tokens[k] += n
        row.what, row.status, row.cost_usd = ev.model, ev.stop_reason or "", ev.cost_usd
        row.tokens = " ".join(f"{k.replace('cache_', 'c').replace('write_', 'w')}={n}"
                              for k, n in tokens.items() if n)
    elif isinstance(ev, Note):
        row.what, row.detail = ev.author, _short(ev.text, 200)
    elif isinstance(ev, ResourceRead):
        row.what, row.detail = ev.uri, ev.error or f"{ev.chars} chars"
        row.status = "ok" if ev.ok else "error"
    elif isinstance(ev, RequestServed):
        row.what = ev.method + (f" {ev.name}" if ev.name else "")
        row.detail = ev.error or f"{ev.items} items"
        row.status = "ok" if ev.ok else "error"
    elif isinstance(ev, RequestRefused):
        row.what = ev.method or ev.transport
        row.detail = ev.reason + (f" ({_short(ev.body)})" if ev.body else "")
        row.status = f"refused {ev.status}" if ev.status else "refused"
    elif isinstance(ev, SessionStarted):
        row.what, row.detail = ev.client, _short({"lab": ev.lab_name, "profile": ev.lab_profile})
    elif isinstance(ev, SessionEnded):
        row.what = ev.reason
    return row


def build(session: dict[str, object], events: list[StoredEvent]) -> Timeline:
    """The timeline of one session (its `sessions` row and its events)."""
    tot = Totals(events=len(events))
    t0 = events[0].event.ts.timestamp() if events else 0.0
    rows = [_row(s, t0, tot, depth) for s, depth in calltree.ordered(events)]
    keys = ("client", "lab_name", "lab_profile", "started_at", "ended_at", "end_reason",
            "labwarden_version", "git_commit")
    header = {k: str(session[k]) for k in keys if session.get(k) not in (None, "")}
    if session.get("git_dirty"):
        header["git_commit"] = header.get("git_commit", "?") + " (dirty)"
    return Timeline(session_id=str(session.get("id", "")), header=header, rows=rows, totals=tot)


def of_session(store: TranscriptStore, session_id: str) -> Timeline:
    """The timeline of a stored session."""
    return build(store.session(session_id), store.events(session_id))
