"""Helpers for tests that talk to `labwarden serve --http` as a raw HTTP client would: a
handshake-era MCP session over plain JSON-RPC posts (so a test can send what the SDK's client
never would), and reading the server's transcript sessions back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx2 as httpx

from labwarden.transcripts.store import TranscriptStore

VERSION = "2025-11-25"
ACCEPT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class RawSession:
    """One MCP session over raw JSON-RPC posts."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.http = httpx.Client(headers={**ACCEPT, **(headers or {})}, timeout=120)
        self.sid: str | None = None
        self.next_id = 1

    def initialize(self) -> RawSession:
        res = self.post("initialize", {"protocolVersion": VERSION, "capabilities": {},
                                       "clientInfo": {"name": "raw", "version": "0"}})
        assert "result" in res, res
        self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                       headers=self._headers())
        return self

    def _headers(self) -> dict[str, str]:
        return {"Mcp-Session-Id": self.sid, "MCP-Protocol-Version": VERSION} if self.sid else {}

    def raw(self, payload: Any) -> httpx.Response:
        return self.http.post(self.url, content=json.dumps(payload).encode(), headers=self._headers())

    def post(self, method: str, params: Any) -> dict[str, Any]:
        rid = self.next_id
        self.next_id += 1
        r = self.raw({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        if self.sid is None and "mcp-session-id" in r.headers:
            self.sid = r.headers["mcp-session-id"]
        return parse(r)

    def close(self) -> None:
        if self.sid:
            self.http.delete(self.url, headers=self._headers())
        self.http.close()


def parse(r: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC reply of a response (a JSON body, or the last data line of an SSE body)."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        data = [ln[5:].strip() for ln in r.text.splitlines() if ln.startswith("data:")]
        return json.loads(data[-1]) if data else {}
    return r.json() if r.content else {"status": r.status_code}


def session_events(db: Path, mcp_session_id: str) -> tuple[str, list[Any]]:
    """(transcript session id, its events) of the transcript session serving an MCP session."""
    with TranscriptStore(db) as store:
        for s in store.sessions():
            events = [e.event for e in store.events(s.id)]
            if events and getattr(events[0], "mcp_session_id", None) == mcp_session_id:
                return s.id, events
    raise AssertionError(f"no transcript session for MCP session {mcp_session_id}")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server the way a person does (SIGINT, then wait): sessions end, anchors written."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
