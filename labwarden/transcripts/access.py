"""Which transcript sessions a principal may read.

A session records its principal when it starts (SessionStarted.principal): `local:USER` for
whoever runs labwarden on this host (CLI, stdio, in-process), `bearer:NAME` for an HTTP client
with a token, `mcp-session:ID` for an anonymous HTTP client on loopback (nothing proves who it
is, so it is its own principal). Remote principals read only their own principal's sessions;
local ones read local sessions and those written before principals were recorded (the rule is
core/principals.py's, which submitted patches follow too)."""

from __future__ import annotations

from collections.abc import Callable

from labwarden.core.principals import may_read
from labwarden.transcripts.store import TranscriptStore


def readable(store: TranscriptStore, reader: str | None) -> Callable[[str], bool]:
    """A filter for TranscriptStore.resolve: the session ids `reader` may read."""
    return lambda sid: may_read(reader, store.principal(sid))


__all__ = ["may_read", "readable"]
