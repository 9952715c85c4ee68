"""Which transcript sessions a principal may read.

A session records its principal when it starts (SessionStarted.principal): `local:USER` for
whoever runs labwarden on this host (CLI, stdio, in-process), `bearer:NAME` for an HTTP client
with a token, `mcp-session:ID` for an anonymous HTTP client on loopback (nothing proves who it
is, so it is its own principal). Remote principals read only their own principal's sessions;
local ones read local sessions and those written before principals were recorded."""

from __future__ import annotations

from collections.abc import Callable

from labwarden.transcripts.store import TranscriptStore


def may_read(reader: str | None, owner: str | None) -> bool:
    """Whether a session acting for `reader` may read one written for `owner` (reader None:
    in-process Python, which can open the database anyway)."""
    if reader is None or reader == owner:
        return True
    return reader.startswith("local:") and (owner is None or owner.startswith("local:"))


def readable(store: TranscriptStore, reader: str | None) -> Callable[[str], bool]:
    """A filter for TranscriptStore.resolve: the session ids `reader` may read."""
    return lambda sid: may_read(reader, store.principal(sid))
