"""Did this request leave its transcript event? A per-request mark (not a door): the MCP
server's door (server/door.py) asks it after every request, so a request that failed before
reaching the runner -- an SDK validation error, an unknown method -- is logged there instead,
and nothing is logged twice.

A per-request mark in a context variable: the door sets one, the runner ticks it whenever it
writes a call's event. The mark is a mutable object, so a tick made in a task the request's
context was copied into still reaches the door."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class Mark:
    events: int = 0
    """Call events (tool_called, resource_read) the runner wrote for this request."""


current: ContextVar[Mark | None] = ContextVar("labwarden_request_mark", default=None)


def logged() -> None:
    """The runner wrote this request's event."""
    mark = current.get()
    if mark is not None:
        mark.events += 1
