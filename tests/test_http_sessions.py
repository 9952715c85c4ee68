"""HTTP sessions (issue 15, class 6): each MCP client over streamable HTTP gets its own
transcript session, budget and lease holder, and reads only what its principal may read --
another client's transcript does not exist for it (not by id, not by prefix, not through the
report tool). With named tokens, one principal's sessions read each other, not another's.
A request of the sessionless 2026 protocol is refused (the SDK's client falls back to the
handshake by itself) and logged. Real `labwarden serve --http`, the SDK's client, raw posts."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab.layout import VlabLayout

from .httplab import ACCEPT, stop
from .test_mcp_server import _serve_http
from .tooling import baseline

pytestmark = pytest.mark.anyio


def _budgeted(lab: VlabLayout, calls: int) -> Path:
    toml = lab.lab_toml.with_name(f"lab-calls{calls}.toml")
    toml.write_text(lab.lab_toml.read_text().replace(
        "[policy]", f"[policy.budgets]\ntool_calls = {calls}\n\n[policy]"))
    return toml


async def _current(client: Client) -> list[dict[str, Any]]:
    res = await client.read_resource("labwarden://transcripts/current")
    return json.loads(res.contents[0].text)  # type: ignore[union-attr]


async def test_each_client_its_own_session_budget_and_transcript(lab: VlabLayout) -> None:
    prof = _budgeted(lab, 2)
    proc, port = _serve_http(lab, "--lab", str(prof))
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with Client(url) as a, Client(url) as b:
            assert a.protocol_version != "2026-07-28"  # fell back to the handshake: a session
            mine_a, mine_b = await _current(a), await _current(b)  # a read is not a tool call
            sid_a, sid_b = mine_a[0]["session_id"], mine_b[0]["session_id"]
            assert sid_a != sid_b
            assert mine_a[0]["event"]["principal"].startswith("mcp-session:")
            assert mine_a[0]["event"]["principal"] != mine_b[0]["event"]["principal"]
            for _ in range(2):
                assert not (await a.call_tool("lab_status", {})).is_error
            over = await a.call_tool("lab_status", {})  # a: 2 of 2 used
            assert over.is_error and "budget_exceeded" in over.content[0].text  # type: ignore[union-attr]
            assert not (await b.call_tool("lab_status", {})).is_error  # b's budget is its own
            # a reads only its own principal's sessions: b's does not exist for it
            with pytest.raises(MCPError, match="no session"):
                await a.read_resource(f"labwarden://transcripts/{sid_b}")
            for prefix in (sid_b[:-2], sid_b[:9], "2"):  # a prefix finds a's own, never b's
                try:
                    got = json.loads((await a.read_resource(
                        f"labwarden://transcripts/{prefix}")).contents[0].text)  # type: ignore[union-attr]
                except MCPError as exc:
                    assert sid_b not in str(exc)
                else:
                    assert {e["session_id"] for e in got} == {sid_a}
            refused = await a.call_tool("report", {"session": sid_b})
            assert refused.is_error and sid_b not in refused.content[0].text  # type: ignore[union-attr]
    finally:
        stop(proc)
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        ended = {sid: [e.event.kind for e in store.events(sid)] for sid in (sid_a, sid_b)}
    assert all(kinds[-1] == "session_ended" for kinds in ended.values())


async def test_one_clients_lease_is_the_others_lease_held(lab: VlabLayout) -> None:
    proc, port = _serve_http(lab)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with Client(url) as a:
            assert not (await a.call_tool("fingerprint_verify", {"build_id": baseline(lab)})).is_error
            assert not (await a.call_tool("associate", {"stations": 0})).is_error  # takes the lease
            async with Client(url) as b:
                held = await b.call_tool("associate", {"stations": 0})
                assert held.is_error and "lease_held" in held.content[0].text  # type: ignore[union-attr]
        # a's MCP session ended: its lab session ended and released the lease
        async with Client(url) as b:
            assert not (await b.call_tool("associate", {"stations": 0})).is_error
    finally:
        stop(proc)
    assert not (lab.run_dir / "labwarden.lease").exists()


async def test_named_tokens_are_principals(lab: VlabLayout, tmp_path: Path) -> None:
    tokens = {"alice": secrets.token_urlsafe(24), "bob": secrets.token_urlsafe(24)}
    tf = tmp_path / "tokens"
    tf.write_text("".join(f"{n} {t}\n" for n, t in tokens.items()))
    tf.chmod(0o600)
    proc, port = _serve_http(lab, "--token-file", str(tf))
    url = f"http://127.0.0.1:{port}/mcp"

    def client(who: str) -> Client:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {tokens[who]}"}, timeout=60)
        return Client(streamable_http_client(url, http_client=http))

    try:
        async with client("alice") as first:
            alice1 = (await _current(first))[0]
            assert alice1["event"]["principal"] == "bearer:alice"
        async with client("alice") as again, client("bob") as bob:
            events = json.loads((await again.read_resource(
                f"labwarden://transcripts/{alice1['session_id']}")).contents[0].text)  # type: ignore[union-attr]
            assert events[0]["session_id"] == alice1["session_id"]  # alice reads alice's
            with pytest.raises(MCPError):
                await bob.read_resource(f"labwarden://transcripts/{alice1['session_id']}")
    finally:
        stop(proc)


def test_a_sessionless_2026_request_is_refused_and_logged(lab: VlabLayout) -> None:
    proc, port = _serve_http(lab)
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/mcp",
                       headers={**ACCEPT, "MCP-Protocol-Version": "2026-07-28"},
                       json={"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                             "params": {"name": "lab_status", "arguments": {},
                                        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == -32022 and "2025-11-25" in err["data"]["supported"]
    finally:
        stop(proc)
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        door = max((s for s in store.sessions() if store.principal(s.id) == "server"),
                   key=lambda s: s.started_at)
        refused = [e.event for e in store.events(door.id) if e.event.kind == "request_refused"]
    assert [(e.method, e.status) for e in refused] == [("tools/call", 400)]
