"""Arguments nested past the limit (core/nesting.py) are refused `too_deep` with a reason and a
remedy, and logged, on every door -- MCP over stdio (a real `labwarden serve` child, raw lines
and the SDK's client), streamable HTTP (a real `serve --http`, raw posts: the SDK's client cannot
even encode 10000 levels), the CLI's `call` and in-process -- and the server answers the next
call. Before the limit, 200 levels got no answer and no transcript row over stdio, and a 500
with a RecursionError over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import GuardDecision, ToolCalled
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab.layout import VlabLayout

from .httplab import ACCEPT, VERSION, RawSession, parse, stop
from .test_mcp_server import _serve_http

pytestmark = pytest.mark.anyio
LABWARDEN = str(Path(sys.executable).parent / "labwarden")


def lists(depth: int) -> str:
    return "[" * depth + "]" * depth


def dicts(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


DEEP = {"lists-200": lists(200), "dicts-10000": dicts(10000), "lists-10000": lists(10000)}
"""Argument values (JSON text) past the limit: where the SDK's parser broke (200) and far past
Python's recursion limit (10000)."""


def _refusals(lab: VlabLayout) -> list[GuardDecision]:
    """Every `too_deep` refusal in the lab's transcript."""
    db = lab.data_dir / "transcripts.db"
    if not db.exists():
        return []
    with TranscriptStore(db) as store:
        events = [e.event for s in store.sessions() for e in store.events(s.id)]
    return [e for e in events if isinstance(e, GuardDecision) and e.code == "too_deep"]


def _tool_calls(lab: VlabLayout, tool: str) -> list[ToolCalled]:
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        return [e.event for s in store.sessions() for e in store.events(s.id)
                if isinstance(e.event, ToolCalled) and e.event.call.tool == tool]


def _deep_call(rid: int, value: str) -> str:
    """A tools/call of lab_status whose argument `deep` is `value` (JSON text: json.dumps would
    recurse into it)."""
    return ('{"jsonrpc":"2.0","id":' + str(rid) + ',"method":"tools/call","params":{"name":'
            '"lab_status","arguments":{"deep":' + value + "}}}")


def _refused_json(text: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(text[text.index("{"):])
    return body


# -- the cut itself --------------------------------------------------------------------------

def test_the_cut_leaves_shallow_json_alone_and_never_recurses() -> None:
    from labwarden.core.nesting import MAX_DEPTH, clip_text, too_deep

    shallow = json.dumps({"patches": ["0901", "0902"], "diff": "[[[[{{{{" * 40})
    assert clip_text(shallow) is shallow  # brackets inside strings are not nesting
    cut = json.loads(clip_text('{"x":' + lists(100_000) + ', "y": 1}'))
    assert cut["y"] == 1  # what follows the cut survives
    deep = too_deep(cut)
    assert deep is not None and deep.field == "x" and deep.cut and deep.depth == 100_001
    assert too_deep({"a": [[{"b": 1}]]}) is None
    nested: Any = 1
    for _ in range(MAX_DEPTH):
        nested = [nested]
    assert too_deep({"a": nested}) is not None and too_deep({"a": nested[0]}) is None


# -- stdio ----------------------------------------------------------------------------------

def _line(proc: subprocess.Popen[bytes], want: int) -> dict[str, Any]:
    """The reply with id `want` (notifications skipped); fails if the server goes quiet."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, f"stdio server closed: {proc.stderr.read() if proc.stderr else b''!r}"
        msg: dict[str, Any] = json.loads(line)
        if msg.get("id") == want:
            return msg
    raise AssertionError(f"no reply {want}")


def test_stdio_refuses_deep_arguments_and_answers_the_next_call(lab: VlabLayout) -> None:
    before = len(_refusals(lab))
    proc = subprocess.Popen([LABWARDEN, "serve", "--lab", str(lab.lab_toml)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ})
    assert proc.stdin is not None

    def send(text: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(text.encode() + b"\n")
        proc.stdin.flush()

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}))
        assert "result" in _line(proc, 0)
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for i, value in enumerate(DEEP.values(), start=1):
            send(_deep_call(i, value))
            reply = _line(proc, i)
            assert reply["result"]["isError"], reply
            refused = _refused_json(reply["result"]["content"][0]["text"])
            assert refused["code"] == "too_deep" and refused["remedy"], refused
            assert "deep" in refused["reason"] and "limit" in refused["reason"]
        send(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                         "params": {"name": "lab_status", "arguments": {}}}))
        assert not _line(proc, 9)["result"]["isError"]  # still serving
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)
    refused = _refusals(lab)[before:]
    assert len(refused) == len(DEEP) and all(r.tool == "lab_status" for r in refused)


async def test_stdio_through_the_sdk_client(lab: VlabLayout) -> None:
    """The SDK's own client (it encodes up to ~250 levels) over a real stdio child."""
    before = len(_refusals(lab))
    params = StdioServerParameters(command=LABWARDEN, args=["serve", "--lab", str(lab.lab_toml)],
                                   env={**os.environ})
    async with Client(params) as client:
        res = await client.call_tool("lab_status", {"deep": json.loads(lists(200))})
        assert res.is_error
        refused = _refused_json(res.content[0].text)  # type: ignore[union-attr]
        assert refused["code"] == "too_deep" and refused["remedy"]
        assert not (await client.call_tool("lab_status", {})).is_error
    assert len(_refusals(lab)[before:]) == 1


# -- streamable HTTP ---------------------------------------------------------------------------

def test_http_refuses_deep_arguments_and_answers_the_next_call(lab: VlabLayout) -> None:
    before = len(_refusals(lab))
    proc, port = _serve_http(lab)
    url = f"http://127.0.0.1:{port}/mcp"
    session = RawSession(url).initialize()
    try:
        for i, value in enumerate(DEEP.values(), start=100):
            body = _deep_call(i, value).encode()
            r = session.http.post(url, content=body, headers=session._headers())
            assert r.status_code == 200, (r.status_code, r.text[:400])
            reply = parse(r)
            assert reply["id"] == i and reply["result"]["isError"], reply
            refused = _refused_json(reply["result"]["content"][0]["text"])
            assert refused["code"] == "too_deep" and refused["remedy"], refused
        # not even a session: the door still cuts before its own decoder
        r = httpx.post(url, content=b'{"jsonrpc":"2.0","id":1,"method":"ping","params":'
                       + dicts(10000).encode() + b"}", headers=ACCEPT, timeout=60)
        assert r.status_code < 500, (r.status_code, r.text[:400])
        assert "result" in session.post("tools/call", {"name": "lab_status", "arguments": {}})
        listed = session.post("tools/list", {})
        assert listed["result"]["tools"]
    finally:
        session.close()
        stop(proc)
    assert len(_refusals(lab)[before:]) == len(DEEP)


# -- the CLI and in-process ------------------------------------------------------------------

def test_cli_call_refuses_deep_arguments(lab: VlabLayout) -> None:
    before = len(_refusals(lab))
    runner = CliRunner()
    for value in DEEP.values():
        res = runner.invoke(app, ["call", "lab_status", '{"deep": ' + value + "}", "--lab",
                                  str(lab.lab_toml)])
        assert res.exit_code == 1, res.output
        assert "too_deep" in res.output or "nest deeper" in res.output, res.output
        assert "remedy" in res.output
    res = runner.invoke(app, ["call", "lab_status", "{}", "--lab", str(lab.lab_toml)])
    assert res.exit_code == 0, res.output
    refused = _refusals(lab)[before:]
    assert len(refused) == len(DEEP)


async def test_in_process_deep_arguments_are_refused_and_stored_cut(lab: VlabLayout) -> None:
    deep: Any = []
    for _ in range(50_000):  # past Python's own recursion limit: nothing may recurse into it
        deep = [deep]
    before = len(_refusals(lab))
    async with open_lab(LabProfile.from_file(lab.lab_toml)) as ctx:
        rec = await call_tool(ctx, "measure", {"stations": 0, "deep": deep})
        assert not rec.ok and rec.error is not None and rec.error.code == "too_deep"
        assert "deep" in rec.error.message and rec.error.remedy
        assert (await call_tool(ctx, "no_such_tool", {"x": deep})).error.code == "too_deep"  # type: ignore[union-attr]
        assert (await call_tool(ctx, "lab_status", {})).ok
    assert len(_refusals(lab)[before:]) == 2
    stored = _tool_calls(lab, "measure")[-1].call.args
    assert len(json.dumps(stored)) < 2000  # stored cut, not 50000 levels


def test_a_playbook_var_set_too_deep_is_cut_for_the_runner_to_refuse() -> None:
    """`labwarden run --set NAME=JSON`: json.loads raised RecursionError near 1000 levels (a
    traceback); cut, the value reaches the runner marked and is refused there like any door's."""
    from labwarden.cli.run import _parse_sets
    from labwarden.core.nesting import too_deep

    values = _parse_sets(["points=" + "[" * 5000 + "]" * 5000, "window_s=3"])
    found = too_deep(values)
    assert found is not None and found.field == "points" and found.cut
    assert values["window_s"] == 3


def test_stdio_from_a_file_cuts_deep_arguments_too(lab: VlabLayout, tmp_path: Path) -> None:
    """stdin a regular file (not a pipe): the SDK's threaded transport serves it, its lines cut
    the same way -- the deep call refused `too_deep` and logged, not dropped unanswered. The
    file ends right after the requests: the end of input must not cancel what is still running
    (the SDK took it for a client that left and answered nothing: CI, once in ~20 runs), so a
    real lab_status that reads the DUT after it is answered too."""
    before = len(_refusals(lab))
    script = tmp_path / "requests.jsonl"
    script.write_text("\n".join([
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {},
            "clientInfo": {"name": "raw-file", "version": "0"}}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        _deep_call(1, DEEP["lists-200"]),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "lab_status", "arguments": {}}})]) + "\n")
    with script.open("rb") as stdin:
        done = subprocess.run([LABWARDEN, "serve", "--lab", str(lab.lab_toml)], stdin=stdin,
                              capture_output=True, env={**os.environ}, timeout=120)
    replies = {r.get("id"): r for r in map(json.loads, done.stdout.decode().splitlines())}
    refused = _refused_json(replies[1]["result"]["content"][0]["text"])
    assert replies[1]["result"]["isError"] and refused["code"] == "too_deep", replies[1]
    assert len(_refusals(lab)) == before + 1
    assert not replies[2]["result"].get("isError"), replies[2]
