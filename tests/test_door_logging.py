"""Every request is logged at the door (issue 15, class 4): an unknown tool over MCP, a call the
SDK's own validation refuses (arguments not an object, no name), resource reads (good, bad,
escaping), malformed `labwarden call` JSON -- each leaves exactly one call event; an oversized
argument is stored as a bounded digest (size + sha256 + head), also when it arrives over HTTP
above the body limit; and `transcripts export --format otlp` writes OpenTelemetry spans that
opentelemetry-proto parses, with the GenAI and MCP semantic-convention attributes.
Real vlab, real `labwarden serve --http` subprocess, raw JSON-RPC posts, the SDK's client."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from labwarden.core.events import ModelCall
from labwarden.core.usage import Usage
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.server.app import build_server
from labwarden.transcripts import otlp
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab.layout import VlabLayout

from .httplab import RawSession, session_events, stop
from .test_mcp_server import _serve_http

pytestmark = pytest.mark.anyio
LABWARDEN = str(Path(sys.executable).parent / "labwarden")
BIG = "A" * 10_000_000


def _db(lab: VlabLayout) -> Path:
    return lab.data_dir / "transcripts.db"


def _kinds(events: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        out[e.kind] = out.get(e.kind, 0) + 1
    return out


def test_raw_mcp_requests_each_leave_one_event(lab: VlabLayout) -> None:
    proc, port = _serve_http(lab)
    try:
        s = RawSession(f"http://127.0.0.1:{port}/mcp").initialize()
        calls = [
            ("rm_rf", {}),                                     # unknown tool
            ("lab_status", "not an object"),                   # SDK validation: arguments
            ("lab_status", [1, 2]),
            (None, {}),                                        # SDK validation: no name
            (42, {}),
            ("associate", {"stations": True}),                 # the tool's own validation
            ("lab_status", {}),                                # good
        ]
        for name, args in calls:
            params: dict[str, Any] = {"arguments": args}
            if name is not None:
                params["name"] = name
            reply = s.post("tools/call", params)
            assert "result" in reply or "error" in reply, reply
        reads = ["labwarden://records/sweeps", "labwarden://records/nope",
                 "labwarden://artifacts/prof-000000000000/..%2F..%2Flab.toml",
                 "labwarden://no/such/thing", "labwarden://lab/status"]
        for uri in reads:
            s.post("resources/read", {"uri": uri})
        s.post("resources/read", {"uri": 17})  # SDK validation of a read
        sid = s.sid
        assert sid is not None
        s.close()
    finally:
        stop(proc)
    _, events = session_events(_db(lab), sid)
    kinds = _kinds(events)
    # one tool_called per call (refusals carry their guard_decision beside it); the lab/status
    # read is the lab_status call it runs; every other read is one resource_read
    assert kinds["tool_called"] == len(calls) + 1, kinds
    assert kinds["resource_read"] == len(reads) - 1 + 1, kinds
    assert kinds["session_ended"] == 1
    tools = [e.call.tool for e in events if e.kind == "tool_called"]
    assert tools[:2] == ["rm_rf", "lab_status"] and tools[-1] == "lab_status"
    reasons = [e.reason for e in events if e.kind == "guard_decision"]
    assert sum("refused before the tool ran" in r for r in reasons) == 4  # the SDK's refusals
    bad_reads = [e for e in events if e.kind == "resource_read" and not e.ok]
    assert len(bad_reads) == 4 and all(e.error for e in bad_reads)


def test_malformed_cli_json_is_logged(lab: VlabLayout) -> None:
    with TranscriptStore(_db(lab)) as store:
        before = {s.id for s in store.sessions()}
    for args in ('{bad', '[1, 2]', '"x"', "{" * 100_000):
        res = subprocess.run([LABWARDEN, "call", "lab_status", args, "--lab", str(lab.lab_toml)],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "error:" in res.stderr and "Traceback" not in res.stderr
    with TranscriptStore(_db(lab)) as store:
        new = [s for s in store.sessions() if s.id not in before]
        assert len(new) == 4
        for s in new:
            kinds = _kinds([e.event for e in store.events(s.id)])
            assert kinds.get("tool_called") == 1 and kinds.get("guard_decision") == 1, kinds
        assert os.path.getsize(_db(lab)) < 50 << 20


async def test_an_oversized_argument_is_stored_as_a_digest(lab: VlabLayout) -> None:
    size0 = os.path.getsize(_db(lab))
    async with open_lab(LabProfile.from_file(lab.lab_toml), client="test") as ctx:
        for tool, args in (("build", {"ref": BIG}), ("no_such_tool", {"x": BIG}),
                           ("lab_status", {"junk": BIG}), ("associate", {"stations": BIG}),
                           ("report", {"title": BIG})):
            rec = await call_tool(ctx, tool, args)
            assert not rec.ok
        async with Client(build_server(LabProfile.from_file(lab.lab_toml))) as client:
            res = await client.call_tool("compare", {"baseline": BIG, "candidate": "swp-1"})
            assert res.is_error
            with pytest.raises(MCPError):
                await client.read_resource("labwarden://reports/" + "r" * 100_000 + ".html")
        assert ctx.transcript is not None and ctx.session_id is not None
        stored = [e.event.call.args for e in ctx.transcript.events(ctx.session_id)
                  if e.event.kind == "tool_called"]
    assert len(stored) == 5
    digests = [next(v for v in a.values() if isinstance(v, dict)) for a in stored]
    for d in digests:
        assert d["$digest"]["size"] >= len(BIG)
        assert len(d["$digest"]["head"]) <= 200
    assert digests[0]["$digest"]["sha256"] == hashlib.sha256(json.dumps(BIG).encode()).hexdigest()
    grown = os.path.getsize(_db(lab)) - size0
    assert grown < 1 << 20, grown  # six 10 MB arguments (and a 100 kB URI) grew it < 1 MB


def test_the_fast_size_check_keeps_exactly_what_the_exact_rule_keeps() -> None:
    """bounded_args sizes small arguments with pydantic_core (every call pays it): at the
    edges -- a value of exactly ARG_CHARS, one more, multi-byte text, numbers pydantic_core
    spells shorter than json.dumps, too many keys -- it keeps what the json.dumps rule keeps."""
    from labwarden.core.digest import ARG_CHARS, MAX_KEYS, bounded_args

    def chars(v: Any) -> int:
        return len(json.dumps(v, ensure_ascii=False, separators=(",", ":")))

    cases: list[dict[str, Any]] = [
        {"n": 5}, {"s": "é" * 1000}, {"s": "x" * (ARG_CHARS - 2)}, {"s": "x" * (ARG_CHARS - 1)},
        {"f": [1.5e-7] * 255}, {"f": [1.5e-7] * 256}, {f"k{i}": i for i in range(MAX_KEYS)},
        {f"k{i}": i for i in range(MAX_KEYS + 1)}]
    for args in cases:
        over = len(args) > MAX_KEYS or any(chars(v) > ARG_CHARS for v in args.values())
        kept = bounded_args(args)
        assert (kept is args) is not over, (list(args), over)
        if over:
            assert "$digest" in json.dumps(kept)


def test_an_oversized_http_body_is_refused_and_logged_as_a_digest(lab: VlabLayout) -> None:
    proc, port = _serve_http(lab)
    try:
        s = RawSession(f"http://127.0.0.1:{port}/mcp").initialize()
        assert "result" in s.post("tools/call", {"name": "lab_status", "arguments": {}})
        r = s.raw({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                   "params": {"name": "lab_status", "arguments": {"x": BIG}}})
        assert r.status_code == 413
        anonymous = RawSession(f"http://127.0.0.1:{port}/mcp")  # no session: the door's own
        assert anonymous.raw({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"x": BIG}}).status_code == 413
        sid = s.sid
        assert sid is not None
        s.close()
    finally:
        stop(proc)
    _, events = session_events(_db(lab), sid)
    refused = [e for e in events if e.kind == "request_refused"]
    assert len(refused) == 1 and refused[0].status == 413
    assert refused[0].body["$digest"]["size"] <= 5000  # the head only, never the 10 MB
    with TranscriptStore(_db(lab)) as store:
        door = max((x for x in store.sessions() if store.principal(x.id) == "server"),
                   key=lambda x: x.started_at)
        at_door = [e.event for e in store.events(door.id) if e.event.kind == "request_refused"]
    assert [e.status for e in at_door] == [413]


async def test_otlp_export_parses_with_the_semantic_conventions(lab: VlabLayout, tmp_path: Path) -> None:
    async with Client(build_server(LabProfile.from_file(lab.lab_toml))) as client:
        assert not (await client.call_tool("lab_status", {})).is_error
        await client.read_resource("labwarden://records/sweeps")
        assert (await client.call_tool("rm_rf", {})).is_error
    with TranscriptStore(_db(lab)) as store:
        sid = max((s for s in store.sessions() if s.client == "mcp"), key=lambda s: s.started_at).id
        store.append(sid, ModelCall(model="claude-sonnet-4-6", cost_usd=0.01, pricing_version="t",
                                    usage=Usage(input_tokens=100, output_tokens=20,
                                                cache_creation_input_tokens=30,
                                                cache_read_input_tokens=50),
                                    request_id="req_1", stop_reason="tool_use"))
    for fmt, name in (("otlp", "s.otlp.json"), ("otlp-proto", "s.otlp.pb")):
        out = tmp_path / name
        res = subprocess.run([LABWARDEN, "transcripts", "export", sid, "--db", str(_db(lab)),
                              "--format", fmt, "-o", str(out)], capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr
        if fmt == "otlp":
            doc = json.loads(out.read_text())
            span0 = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
            assert len(span0["traceId"]) == 32 and len(span0["spanId"]) == 16  # OTLP/JSON: hex
            req = otlp.from_json(out.read_text())
        else:
            req = ExportTraceServiceRequest()
            req.ParseFromString(out.read_bytes())
        spans = req.resource_spans[0].scope_spans[0].spans
        attrs = [{kv.key: kv.value for kv in s.attributes} for s in spans]
        tool = next(a for a in attrs if a.get("gen_ai.tool.name", None) and
                    a["gen_ai.tool.name"].string_value == "lab_status")
        assert tool["gen_ai.operation.name"].string_value == "execute_tool"
        assert tool["mcp.method.name"].string_value == "tools/call"
        unknown = next(s for s in spans if s.name == "tools/call rm_rf")
        assert unknown.status.code == unknown.status.STATUS_CODE_ERROR
        read = next(a for a in attrs if "mcp.resource.uri" in a)
        assert read["mcp.method.name"].string_value == "resources/read"
        assert read["mcp.resource.uri"].string_value == "labwarden://records/sweeps"
        chat = next(a for a in attrs if a.get("gen_ai.operation.name") and
                    a["gen_ai.operation.name"].string_value == "chat")
        assert chat["gen_ai.usage.input_tokens"].int_value == 180  # cache reads/writes included
        assert chat["gen_ai.usage.output_tokens"].int_value == 20
        assert chat["gen_ai.usage.cache_read.input_tokens"].int_value == 50
        assert chat["gen_ai.provider.name"].string_value == "anthropic"
        assert chat["gen_ai.request.model"].string_value == "claude-sonnet-4-6"
        assert all(s.trace_id == spans[0].trace_id for s in spans)
        assert all(s.parent_span_id == spans[0].span_id for s in spans[1:])
        root_events = [e.name for e in spans[0].events]
        assert "guard_decision" in root_events
