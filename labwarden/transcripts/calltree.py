"""A session's calls as a tree: a tool's nested calls (`ctx.call`) and the guard decisions made
under it hang below it by `parent_id` (core/events.py). Replay shows the tree; audit checks it.

The invariant audit checks, for every event with a `parent_id`:
- the parent is a ToolCalled of the same session, allowed by the guard (a refused call ran
  nothing, so nothing can run under it);
- the parent is logged after it (a call's event is written when it ends, its children's before);
- it happened inside the parent's time span -- from the parent's `started_at` to its event's
  `ts` (made as it ended): a child call starts no earlier and ends no later, a guard decision's
  time lies in it, within SLACK_S of clock rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from labwarden.core.events import GuardDecision, ToolCalled
from labwarden.transcripts.store import StoredEvent

SLACK_S = 0.5
"""Tolerance of the span check: started_at is wall clock, duration_s monotonic, both rounded."""


def parent_of(ev: object) -> str | None:
    return ev.parent_id if isinstance(ev, (ToolCalled, GuardDecision)) else None


def ordered(events: Sequence[StoredEvent]) -> list[tuple[StoredEvent, int]]:
    """The events with their depth, each call followed by what ran under it (in seq order),
    indented one level deeper; an event whose parent is not in the session stays where it is."""
    calls = {s.event.call.id for s in events if isinstance(s.event, ToolCalled)}
    kids: dict[str, list[StoredEvent]] = {}
    top: list[StoredEvent] = []
    for s in events:
        pid = parent_of(s.event)
        if pid is not None and pid in calls:
            kids.setdefault(pid, []).append(s)
        else:
            top.append(s)
    out: list[tuple[StoredEvent, int]] = []
    seen: set[int] = set()

    def emit(s: StoredEvent, depth: int) -> None:
        if s.seq in seen:  # a malformed tree (a cycle) is shown once, never looped over
            return
        seen.add(s.seq)
        out.append((s, depth))
        if isinstance(s.event, ToolCalled):
            for kid in kids.get(s.event.call.id, []):
                emit(kid, depth + 1)

    for s in top:
        emit(s, 0)
    for s in events:  # a cycle leaves events no root reaches: shown, flat, at the end
        if s.seq not in seen:
            emit(s, 0)
    return out


def problems(events: Sequence[StoredEvent]) -> list[tuple[int, str]]:
    """(seq, what is wrong) for every event that breaks the tree's invariant (module doc)."""
    parents: dict[str, StoredEvent] = {}
    for s in events:
        if isinstance(s.event, ToolCalled):
            parents.setdefault(s.event.call.id, s)
    slack = timedelta(seconds=SLACK_S)
    out: list[tuple[int, str]] = []
    for s in events:
        ev = s.event
        if not isinstance(ev, (ToolCalled, GuardDecision)) or ev.parent_id is None:
            continue
        pid = ev.parent_id
        what = ev.call.tool if isinstance(ev, ToolCalled) else f"guard decision on {ev.tool}"
        found = parents.get(pid)
        if found is None:
            out.append((s.seq, f"{what}: its parent call {pid} is not in the session (a session "
                               "cut while the parent ran leaves this)"))
            continue
        parent = found.event
        assert isinstance(parent, ToolCalled)
        if parent.guard != "allow":
            out.append((s.seq, f"{what}: its parent {parent.call.tool} ({pid}) was not allowed "
                               "to run"))
        if found.seq <= s.seq:
            out.append((s.seq, f"{what}: its parent {parent.call.tool} ({pid}) is logged before "
                               f"it (seq {found.seq}); a parent ends after its children"))
        # the parent's span: from its start (before the guard ran) to when its event was made
        # (it ended); duration_s alone leaves out the guard's time (a lease, a heal)
        p_start = parent.call.started_at
        p_end = max(parent.ts, p_start + timedelta(seconds=parent.call.duration_s))
        if isinstance(ev, ToolCalled):
            start, end = ev.call.started_at, ev.call.started_at + timedelta(seconds=ev.call.duration_s)
        else:
            start = end = ev.ts
        if start < p_start - slack or end > p_end + slack:
            out.append((s.seq, f"{what}: ran {start:%H:%M:%S.%f}..{end:%H:%M:%S.%f}, outside its "
                               f"parent {parent.call.tool}'s {p_start:%H:%M:%S.%f}..{p_end:%H:%M:%S.%f}"))
    return out
