"""The MCP door: every tool call and every resource read leaves exactly one transcript event,
whatever happens to it (and so does every listing and prompt: a `request_served`) -- including
what never reaches the runner (arguments the SDK's own validation refuses, a malformed request).
An SDK middleware wraps each request: when the request ends and the runner wrote nothing for it
(runtime/request_mark.py counts what it wrote), the door writes the event itself -- a refusal for a tool
call, a `resource_read` for a read.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from mcp.server.context import ServerRequestContext

from labwarden.core.devtext import clean
from labwarden.core.digest import bounded_name
from labwarden.core.events import RequestServed, ResourceRead
from labwarden.runtime import request_mark
from labwarden.runtime.runner import refuse_at_door
from labwarden.server.sessions import lab_for

log = logging.getLogger(__name__)
LOGGED = frozenset({"tools/call", "resources/read"})
SERVED = frozenset({"resources/list", "resources/templates/list", "prompts/list", "prompts/get"})


def _chars(result: Any) -> int:
    contents = result.get("contents", []) if isinstance(result, dict) else \
        getattr(result, "contents", [])
    total = 0
    for c in contents:
        get = c.get if isinstance(c, dict) else lambda k, c=c: getattr(c, k, None)
        total += len(get("text") or get("blob") or "")
    return total


async def _log(rc: ServerRequestContext[Any, Any], result: Any, exc: BaseException | None) -> None:
    params = rc.params if isinstance(rc.params, dict) else {}
    lab = await lab_for(rc)
    if rc.method == "tools/call":
        name = params.get("name")
        name = name if isinstance(name, str) else repr(name)
        why = clean(str(exc) if exc is not None else "the request ended before the tool ran", 400)
        refuse_at_door(lab, name, params.get("arguments"),
                       f"the MCP request was refused before the tool ran: {why}")
        return
    uri = params.get("uri")
    lab.log(ResourceRead(uri=bounded_name(str(uri)), ok=exc is None, chars=_chars(result),
                         error=None if exc is None else clean(str(exc), 400)), durable=False)


def _items(result: Any) -> int:
    for key in ("resources", "resource_templates", "resourceTemplates", "prompts", "messages"):
        found = result.get(key) if isinstance(result, dict) else getattr(result, key, None)
        if isinstance(found, list):
            return len(found)
    return 0


async def _served(rc: ServerRequestContext[Any, Any], call_next: Any) -> Any:
    params = rc.params if isinstance(rc.params, dict) else {}
    name = params.get("name") if rc.method == "prompts/get" else None
    result: Any = None
    failure: BaseException | None = None
    try:
        result = await call_next(rc)
        return result
    except Exception as exc:
        failure = exc
        raise
    finally:
        try:
            lab = await lab_for(rc)
            shown = None if name is None else bounded_name(str(name))
            lab.log(RequestServed(method=rc.method, name=shown, ok=failure is None,
                                  items=_items(result),
                                  error=None if failure is None else clean(str(failure), 400)),
                    durable=False)
        except Exception:
            log.exception("could not log %s", rc.method)


async def middleware(rc: ServerRequestContext[Any, Any], call_next: Any) -> Any:
    """Log the tool call or resource read once, whether or not it reached the runner; and
    every listing and prompt."""
    if rc.method in SERVED and rc.request_id is not None:
        return await _served(rc, call_next)
    if rc.method not in LOGGED or rc.request_id is None:
        return await call_next(rc)
    mark = request_mark.Mark()
    token = request_mark.current.set(mark)
    try:
        try:
            result = await call_next(rc)
        except Exception as exc:
            if mark.events == 0:
                with contextlib.suppress(Exception):  # never hide the request's own failure
                    await _log(rc, None, exc)
            raise
        if mark.events == 0:
            try:
                await _log(rc, result, None)
            except Exception:
                log.exception("could not log %s", rc.method)
        return result
    finally:
        request_mark.current.reset(token)
