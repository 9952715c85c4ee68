"""The HTTP door, outside everything the SDK does: every request is logged at the door, and every
client gets an MCP session.

- Sessions: labwarden serves the handshake era of streamable HTTP (2025-11-25 and earlier),
  whose MCP sessions carry a client's transcript session, budget and lease holder
  (server/sessions.py). A request of the 2026-07-28 era has no session -- every request would
  stand alone, and a budget per request is no budget -- so it is answered with the protocol's
  "unsupported version" error naming the versions served; the SDK's client falls back to the
  handshake by itself.
- Logging: a request refused before it reaches MCP (no valid token, a foreign Origin, an
  unknown session, an oversized body, an unserved protocol era) leaves a `request_refused`
  event: in the session it names, when that session is live, else in the server's own door
  session. Bodies are stored bounded (core/digest.py). The body limit is enforced here, before
  anything is buffered beyond it.
- Depth: a body nested past core/nesting.WIRE_DEPTH is cut here, before any decoder recurses
  into it; the tool call then reaches the runner, which refuses it `too_deep` and logs it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labwarden.core.digest import bounded_args, digest_of
from labwarden.core.events import RequestRefused
from labwarden.core.nesting import clip_bytes

log = logging.getLogger(__name__)
DOOR = "http-door"
"""The hub's session for requests that name no live MCP session."""
REASONS = {400: "malformed request (or no MCP session: initialize first)",
           401: "no valid bearer token", 403: "Host or Origin not allowed (DNS-rebinding protection)",
           404: "unknown or expired MCP session", 405: "method not allowed",
           406: "Accept must allow application/json and text/event-stream",
           413: f"body over {DEFAULT_MAX_REQUEST_BODY_SIZE >> 20} MiB", 415: "not JSON",
           503: "too many open MCP sessions"}


def _body_record(body: bytes) -> dict[str, Any] | None:
    if not body:
        return None
    text = body.decode("utf-8", "replace")
    try:
        return bounded_args(json.loads(text))
    except (ValueError, RecursionError):
        return digest_of(text)


def _method(body: bytes) -> tuple[str | None, Any]:
    try:
        msg = json.loads(body)
    except (ValueError, RecursionError):
        return None, None
    if isinstance(msg, dict):
        method = msg.get("method")
        return (method if isinstance(method, str) else None), msg.get("id")
    return None, None


class HttpDoor:
    """ASGI middleware around the streamable HTTP app of a LabServer (`server.hub` is set by its
    lifespan)."""

    def __init__(self, app: ASGIApp, server: Any, max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self.app = app
        self.server = server
        self.max_body = max_body

    async def _log(self, event: RequestRefused) -> None:
        hub = getattr(self.server, "hub", None)
        if hub is None:
            return
        try:
            live = hub.sessions().get(event.mcp_session_id or "")
            lab = live if live is not None else await hub.session(DOOR, principal="server")
            lab.log(event, durable=False)
        except Exception:  # the refusal is answered whatever happens to its log line
            log.exception("could not log a refused HTTP request")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        sid = headers.get("mcp-session-id")
        body = b""
        if scope["method"] == "POST":
            more = True
            while more:
                msg = await receive()
                if msg["type"] != "http.request":
                    return  # the client went away
                body += msg.get("body", b"")
                more = msg.get("more_body", False)
                if len(body) > self.max_body:
                    await self._log(RequestRefused(
                        transport="http", status=413, reason=REASONS[413], mcp_session_id=sid,
                        body=digest_of(body[:4096].decode("utf-8", "replace") + "...")))
                    await _reply(send, 413, {"jsonrpc": "2.0", "id": None, "error": {
                        "code": -32600, "message": REASONS[413]}})
                    return
        if body and (cut := clip_bytes(body)) != body:
            # nested past core/nesting.WIRE_DEPTH: cut before any decoder (the SDK's parser fails
            # at 200 levels, json's recursion near 1000: a 500); the runner refuses the call
            body = cut
            scope = {**scope, "headers": [(k, str(len(body)).encode()) if k.lower() == b"content-length"
                                          else (k, v) for k, v in scope["headers"]]}
        method, rid = _method(body)
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            reason = (f"protocol {version} has no sessions; labwarden serves "
                      f"{', '.join(HANDSHAKE_PROTOCOL_VERSIONS)} (initialize first)")
            await self._log(RequestRefused(transport="http", status=400, method=method, reason=reason,
                                           body=_body_record(body), mcp_session_id=sid))
            await _reply(send, 400, {"jsonrpc": "2.0", "id": rid, "error": {
                "code": UNSUPPORTED_PROTOCOL_VERSION, "message": reason,
                "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version}}})
            return
        status: list[int] = []
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        await self.app(scope, replay, watch)
        if status and status[0] >= 400:
            await self._log(RequestRefused(
                transport="http", status=status[0], method=method, mcp_session_id=sid,
                reason=REASONS.get(status[0], "refused by the transport"), body=_body_record(body)))


async def _reply(send: Send, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
