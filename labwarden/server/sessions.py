"""Which lab session a request belongs to, and who it acts for.

Streamable HTTP (the 2025 handshake era) gives each client an MCP session (Mcp-Session-Id):
each gets a lab session of its own -- transcript session, budget, lease holder -- opened on its
first request and ended when the MCP session ends (the SDK unwinds the connection's exit stack:
DELETE, idle timeout, shutdown). A request without an MCP session (stdio, in memory: one client
per server) uses the server's one default session.

The principal: `bearer:NAME` when the HTTP client authenticated with a token, `mcp-session:ID`
for an anonymous client on loopback (nothing proves who it is: the session is its own), and
`local:USER` for stdio and in-memory clients (the user who started the server).
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext

from labwarden.runtime.session import LabHub, LabSession, local_principal

DEFAULT = "default"
_STATE_KEY = "labwarden.session"


def _connection(rc: ServerRequestContext[Any, Any]) -> Any:
    # The SDK keeps the per-client Connection (session id, exit stack, scratch state) on the
    # request's ServerSession without a public accessor (mcp 2.3): read it in this one place.
    return getattr(rc.session, "_connection", None)


def identity(rc: ServerRequestContext[Any, Any], hub: LabHub) -> tuple[str, str, str | None]:
    """(session key, principal, MCP session id) of a request."""
    conn = _connection(rc)
    mcp_sid = getattr(conn, "session_id", None)
    if mcp_sid is None:
        return DEFAULT, local_principal(hub.user), None
    user = rc.request.scope.get("user") if rc.request is not None else None
    token = getattr(user, "access_token", None)
    principal = f"bearer:{token.client_id}" if token is not None else f"mcp-session:{mcp_sid}"
    return mcp_sid, principal, mcp_sid


async def lab_for(rc: ServerRequestContext[Any, Any]) -> LabSession:
    """The lab session of the request's client, opened on its first request."""
    hub: LabHub = rc.lifespan_context.hub
    key, principal, mcp_sid = identity(rc, hub)
    lab = await hub.session(key, principal=principal, mcp_session_id=mcp_sid)
    hub.reload_profile()  # an edited profile: validated, then used (or refused), noted in `lab`
    conn = _connection(rc)
    if mcp_sid is not None and conn is not None and conn.state.get(_STATE_KEY) != key:
        conn.state[_STATE_KEY] = key
        conn.exit_stack.push_async_callback(hub.close, key)  # the MCP session ends: so does ours
    return lab
