"""Export a session as OpenTelemetry spans (OTLP), with the GenAI and MCP semantic-convention
attributes, so any tracing backend can show what an agent did in the lab and what it cost.

One trace per session: a root span for the session; under it a span per tool call
(`gen_ai.operation.name = execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id`; from an MCP
client also `mcp.method.name = tools/call`), per model call (`chat`, `gen_ai.request.model`,
`gen_ai.usage.*`) and per resource read (`mcp.method.name = resources/read`,
`mcp.resource.uri`); guard decisions, refused requests and notes are events on the root span.
Attribute names follow the semantic conventions (GenAI and MCP, development status, 2026):
`gen_ai.usage.input_tokens` counts every input token, cached ones included (Anthropic's
`input_tokens` does not, so the cache reads and writes are added back), with the cache parts
also given as `gen_ai.usage.cache_read.input_tokens` / `gen_ai.usage.cache_creation.input_tokens`.

Two encodings: OTLP/JSON (the file exporter's format: trace and span ids in hex) and the
protobuf binary of an ExportTraceServiceRequest.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from labwarden import __version__
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
from labwarden.transcripts.store import StoredEvent

PROVIDER = "anthropic"


def _value(v: Any) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[_value(x) for x in v]))
    return AnyValue(string_value=str(v))


def _attrs(pairs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_value(v)) for k, v in pairs.items() if v is not None]


def _ns(t: datetime) -> int:
    return int(t.timestamp() * 1e9)


def _id(*parts: str, size: int) -> bytes:
    return hashlib.sha256("\0".join(parts).encode()).digest()[:size]


def spans(session_id: str, events: list[StoredEvent]) -> ExportTraceServiceRequest:
    """The session as one OTLP trace."""
    trace_id = _id("trace", session_id, size=16)
    root_id = _id("root", session_id, size=8)
    started = next((e.event for e in events if isinstance(e.event, SessionStarted)), None)
    mcp = bool(started and started.client.startswith("mcp"))
    common = {"gen_ai.conversation.id": session_id,
              "mcp.session.id": started.mcp_session_id if started else None}
    root = Span(trace_id=trace_id, span_id=root_id, name=f"labwarden session {session_id}",
                kind=Span.SPAN_KIND_SERVER if mcp else Span.SPAN_KIND_INTERNAL)
    out: list[Span] = [root]
    first = events[0].event.ts if events else None
    last = events[-1].event.ts if events else None
    call_seq = {e.event.call.id: e.seq for e in events if isinstance(e.event, ToolCalled)}
    for stored in events:
        ev = stored.event
        sid = _id("span", session_id, str(stored.seq), size=8)
        if isinstance(ev, SessionStarted):
            root.attributes.extend(_attrs({**common, "labwarden.client": ev.client,
                                           "labwarden.lab": ev.lab_name,
                                           "labwarden.principal": ev.principal,
                                           "labwarden.version": ev.labwarden_version}))
        elif isinstance(ev, ToolCalled):
            c = ev.call
            end = c.started_at + timedelta(seconds=c.duration_s)
            parent_seq = call_seq.get(ev.parent_id) if ev.parent_id else None
            nested = parent_seq is not None  # a tool's own call: a child of its parent's span
            span = Span(trace_id=trace_id, span_id=sid,
                        parent_span_id=_id("span", session_id, str(parent_seq), size=8)
                        if nested else root_id,
                        name=f"tools/call {c.tool}" if mcp and not nested else f"execute_tool {c.tool}",
                        kind=Span.SPAN_KIND_SERVER if mcp and not nested else Span.SPAN_KIND_INTERNAL,
                        start_time_unix_nano=_ns(c.started_at), end_time_unix_nano=_ns(end))
            span.attributes.extend(_attrs({
                **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": c.tool,
                "gen_ai.tool.call.id": c.id, "gen_ai.tool.type": "function",
                "mcp.method.name": "tools/call" if mcp and not nested else None,
                "error.type": c.error.kind if c.error else None,
                "labwarden.refusal.code": c.error.code if c.error else None,
                "labwarden.guard": ev.guard, "labwarden.result_tokens_est": ev.result_tokens_est,
                "labwarden.measured": ev.measured or None}))
            span.status.CopyFrom(Status(code=Status.STATUS_CODE_OK) if c.ok else Status(
                code=Status.STATUS_CODE_ERROR, message=c.error.message[:300] if c.error else ""))
            out.append(span)
        elif isinstance(ev, ModelCall):
            u = ev.usage
            writes, reads = sum(u.cache_writes()), u.cache_reads()
            span = Span(trace_id=trace_id, span_id=sid, parent_span_id=root_id,
                        name=f"chat {ev.model}", kind=Span.SPAN_KIND_CLIENT,
                        start_time_unix_nano=_ns(ev.ts), end_time_unix_nano=_ns(ev.ts))
            span.attributes.extend(_attrs({
                **common, "gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER,
                "gen_ai.request.model": ev.model, "gen_ai.response.id": ev.request_id,
                "gen_ai.response.finish_reasons": [ev.stop_reason] if ev.stop_reason else None,
                "gen_ai.usage.input_tokens": u.input_tokens + writes + reads,
                "gen_ai.usage.output_tokens": u.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": reads,
                "gen_ai.usage.cache_creation.input_tokens": writes,
                "labwarden.cost_usd": ev.cost_usd, "labwarden.pricing_version": ev.pricing_version}))
            out.append(span)
        elif isinstance(ev, ResourceRead):
            span = Span(trace_id=trace_id, span_id=sid, parent_span_id=root_id, name="resources/read",
                        kind=Span.SPAN_KIND_SERVER, start_time_unix_nano=_ns(ev.ts),
                        end_time_unix_nano=_ns(ev.ts))
            span.attributes.extend(_attrs({**common, "mcp.method.name": "resources/read",
                                           "mcp.resource.uri": ev.uri,
                                           "error.type": None if ev.ok else "resource_error"}))
            if not ev.ok:
                span.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=ev.error or ""))
            out.append(span)
        elif isinstance(ev, RequestServed):
            span = Span(trace_id=trace_id, span_id=sid, parent_span_id=root_id, name=ev.method,
                        kind=Span.SPAN_KIND_SERVER, start_time_unix_nano=_ns(ev.ts),
                        end_time_unix_nano=_ns(ev.ts))
            span.attributes.extend(_attrs({**common, "mcp.method.name": ev.method,
                                           "gen_ai.prompt.name": ev.name,
                                           "error.type": None if ev.ok else "request_error"}))
            if not ev.ok:
                span.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=ev.error or ""))
            out.append(span)
        elif isinstance(ev, (GuardDecision, RequestRefused, Note)):
            body = ev.model_dump(mode="json", exclude={"id", "session_id", "seq", "ts", "kind"})
            root.events.add(time_unix_nano=_ns(ev.ts), name=ev.kind,
                            attributes=_attrs({k: v if isinstance(v, (str, int, float, bool))
                                               else json.dumps(v) for k, v in body.items()}))
        elif isinstance(ev, SessionEnded):
            root.attributes.extend(_attrs({"labwarden.end_reason": ev.reason}))
    if first is not None and last is not None:
        root.start_time_unix_nano, root.end_time_unix_nano = _ns(first), _ns(last)
    resource = Resource(attributes=_attrs({"service.name": "labwarden",
                                           "service.version": __version__}))
    scope = InstrumentationScope(name="labwarden.transcripts", version=__version__)
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=out)])])


def to_json(req: ExportTraceServiceRequest) -> str:
    """OTLP/JSON: protobuf's JSON mapping, with trace and span ids in hex as OTLP requires."""
    doc = json_format.MessageToDict(req)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _b64_to_hex(span[key])
    return json.dumps(doc, ensure_ascii=False) + "\n"


def from_json(text: str) -> ExportTraceServiceRequest:
    """Parse OTLP/JSON back (ids from hex) -- what a collector does with the file."""
    doc = json.loads(text)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _hex_to_b64(span[key])
    return json_format.ParseDict(doc, ExportTraceServiceRequest())


def _b64_to_hex(v: str) -> str:
    return base64.b64decode(v).hex()


def _hex_to_b64(v: str) -> str:
    return base64.b64encode(bytes.fromhex(v)).decode()
