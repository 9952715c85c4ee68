"""Register the tools a lab can run as MCP tools, generated from their specs.

The published input schema is the tool's own (descriptions, bounds, examples), but MCP-side
validation is left lenient on purpose: every call, malformed ones included, reaches the runner,
so the guard decides and the transcript records it whatever the client is.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import WithJsonSchema

from labwarden.core.call import ToolFailure
from labwarden.core.devtext import UNTRUSTED_NOTE, quoted
from labwarden.core.spec import ToolSpec
from labwarden.runtime.runner import call_tool
from labwarden.server import schemas
from labwarden.server.sessions import lab_for
from labwarden.tools.context import LabContext, current_progress


def _inline(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return _inline(defs[schema["$ref"].split("/")[-1]], defs)
    return {k: ([_inline(x, defs) if isinstance(x, dict) else x for x in v] if isinstance(v, list)
                else _inline(v, defs) if isinstance(v, dict) else v) for k, v in schema.items()}


def _signature(spec: ToolSpec) -> inspect.Signature:
    schema = spec.input.model_json_schema()
    defs = schema.get("$defs", {})
    params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    for name, field in spec.input.model_fields.items():
        prop = _inline(schema["properties"][name], defs)
        default = (inspect.Parameter.empty if field.is_required()
                   else field.get_default(call_default_factory=True))
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[Any, WithJsonSchema(prop)]))
    return inspect.Signature(params, return_annotation=spec.output)


async def call(ctx: Context, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One call through the runner (guard, transcript): its CallToolResult in wire form. A
    failure raises ToolError, which MCPServer turns into an is_error result carrying the JSON
    below.

    The wire form, not the CallToolResult model: the SDK validates a handler's result against
    the protocol's own CallToolResult whichever it gets, and dumps it; a model built here
    would be validated, then dumped, then validated again (bench/tool_overhead.py)."""
    lab: LabContext = await lab_for(ctx.request_context)

    async def progress(done: float, total: float | None, message: str) -> None:
        await ctx.report_progress(done, total, message)

    token = current_progress.set(progress)
    try:
        record = await call_tool(lab, name, arguments)
    finally:
        current_progress.reset(token)
    if not record.ok:
        raise ToolError(failure_json(record.error))
    # the text is the JSON the transcript counted (result_chars): what the model reads, compact
    # (the keys a CallToolResult model dumps: the wire is the same, on every protocol version)
    return {"content": [{"type": "text", "text": record.result_json or "null"}],
            "structuredContent": record.result, "isError": False, "resultType": "complete"}


def failure_json(err: ToolFailure | None) -> str:
    """The refusal or failure a client reads: code, kind, reason, remedy, lines -- and, when the
    reason quotes device output, which fields do and what the marker means."""
    body: dict[str, Any] = {
        "code": (err.code if err else None) or (err.kind if err else "internal"),
        "kind": err.kind if err else "internal",
        "reason": err.message if err else "failed", "remedy": err.remedy if err else None,
        "lines": err.lines[:20] if err else []}
    marked = [k for k in ("reason", "lines") if quoted(json.dumps(body[k], ensure_ascii=False))]
    if marked:
        body["untrusted"] = {"fields": marked, "note": UNTRUSTED_NOTE}
    return json.dumps(body, ensure_ascii=False)


def _handler(spec: ToolSpec) -> Callable[..., Awaitable[Any]]:
    """The function MCPServer publishes (its signature gives the schema); LabServer.call_tool
    short-cuts it, and it makes the same call if reached another way."""
    async def handler(ctx: Context, **kwargs: Any) -> Any:
        return await call(ctx, spec.name, kwargs)

    # inspect.signature reads __signature__, which typeshed's function type does not declare
    handler.__signature__ = _signature(spec)  # type: ignore[attr-defined]
    handler.__name__ = spec.name
    return handler


def register(server: MCPServer[Any], specs: Iterable[ToolSpec]) -> None:
    """`specs`: the tools this lab can run (registry.listed); a call to another still reaches
    the runner, which refuses it `not_applicable` with the reason. What tools/list shows of each
    is server/schemas.py's."""
    for spec in specs:
        server.add_tool(_handler(spec), name=spec.name, description=schemas.description(spec),
                        annotations=schemas.tool_annotations(spec), structured_output=True)
