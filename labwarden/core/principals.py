"""Who may read what another principal wrote: one rule for transcript sessions and submitted
patches.

A principal is who a session acts for: `local:USER` for whoever runs labwarden on this host
(CLI, stdio, in-process), `bearer:NAME` for an HTTP client with a token, `mcp-session:ID` for an
anonymous HTTP client on loopback (nothing proves who it is, so it is its own principal).
Remote principals read only what their own principal wrote; local ones read what local ones
wrote and what was written before principals were recorded (owner None)."""

from __future__ import annotations


def may_read(reader: str | None, owner: str | None) -> bool:
    """Whether a session acting for `reader` may read what one acting for `owner` wrote (reader
    None: in-process Python, which can open the files anyway)."""
    if reader is None or reader == owner:
        return True
    return reader.startswith("local:") and (owner is None or owner.startswith("local:"))
