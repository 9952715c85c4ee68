"""The MCP server through the SDK's real client: in memory, over stdio and over HTTP."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx2 as httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from labwarden.lab.config import LabProfile
from labwarden.server.app import build_server
from labwarden.tools import registry
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import rpc
from labwarden.vlab.layout import VlabLayout

from .conftest import vlab_probes
from .tooling import baseline

pytestmark = pytest.mark.anyio
LABWARDEN = str(Path(sys.executable).parent / "labwarden")




def _server(lab: VlabLayout):  # type: ignore[no-untyped-def]
    return build_server(LabProfile.from_file(lab.lab_toml))


def _err(result) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """The guard's structured refusal (the SDK prefixes 'Error executing tool X: ')."""
    text = result.content[0].text
    return json.loads(text[text.index("{"):])


async def test_tools_have_schemas_and_honest_annotations(lab: VlabLayout) -> None:
    async with Client(_server(lab)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    listed = registry.listed(LabProfile.from_file(lab.lab_toml))
    assert set(tools) == {spec.name for spec in listed}
    assert "associate" in tools and "traffic_sweep" not in tools  # the vlab: clients, no traffic
    for spec in listed:
        name = spec.name
        t = tools[name]
        assert t.description and t.output_schema and t.input_schema["type"] == "object"
        assert set(t.input_schema.get("properties", {})) == set(spec.input.model_fields)
        ann = t.annotations
        assert ann is not None
        assert ann.read_only_hint == (spec.effect in ("read_only", "host_only")), name
        assert ann.destructive_hint == (spec.effect == "destructive"), name
        assert ann.idempotent_hint == spec.idempotent, name
    assert tools["flash"].annotations.destructive_hint  # type: ignore[union-attr]
    assert tools["associate"].input_schema["properties"]["stations"]["anyOf"][0]["maximum"] == 4096
    lab_status_out = tools["lab_status"].output_schema
    assert "running_version" in json.dumps(lab_status_out) and "x-untrusted" in json.dumps(lab_status_out)
    assert "target_pid" not in json.dumps(lab_status_out), "only fields carrying device text"
    assert '"title"' not in json.dumps(tools["sweep"].input_schema)


async def test_a_tool_the_lab_cannot_run_is_refused_with_its_reason(lab: VlabLayout) -> None:
    """The vlab has no traffic load: `saturate` is not listed, and a client that calls it anyway
    (a stale list, a guess) gets `not_applicable` naming the profile key -- logged like any call."""
    async with Client(_server(lab)) as client:
        res = await client.call_tool("saturate", {"length": 1200})
        schema = await client.read_resource("labwarden://schemas/saturate")
    err = _err(res)
    assert res.is_error and err["code"] == "not_applicable", err
    assert "[load] kind" in err["reason"] and "iperf3" in err["reason"], err
    full = json.loads(schema.contents[0].text)  # type: ignore[union-attr]
    assert set(full) == {"input", "output"} and "loss_max_pct" in json.dumps(full["input"])
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        sid = store.sessions()[0].id  # newest first
        calls = [e.event for e in store.events(sid) if e.event.kind == "tool_called"]
    assert calls[-1].call.tool == "saturate" and not calls[-1].call.ok


async def test_call_lab_status_and_refusal_is_error_with_code(lab: VlabLayout) -> None:
    async with Client(_server(lab)) as client:
        res = await client.call_tool("lab_status", {})
        assert not res.is_error
        assert res.structured_content and res.structured_content["target_process"] == "stad"
        bad = await client.call_tool("attribute", {"suspect": "init"})
        assert bad.is_error
        err = _err(bad)
        assert err["code"] == "suspect_not_allowed" and err["remedy"]
        malformed = await client.call_tool("associate", {"stations": "lots"})
        assert malformed.is_error and _err(malformed)["code"] == "invalid_input"
        unknown = await client.call_tool("fingerprint_verify", {"build_id": "$(reboot)"})
        assert _err(unknown)["code"] == "unsafe_argument"


async def test_the_text_is_the_json_the_transcript_counted(lab: VlabLayout) -> None:
    """The model reads content[0].text: it is the structured result, compact (one line), exactly the
    characters the transcript prices (result_chars). The allow is on the call's own event."""
    async with Client(_server(lab)) as client:
        res = await client.call_tool("lab_status", {})
    text = res.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == res.structured_content and "\n" not in text
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        newest = max((s for s in store.sessions() if s.client == "mcp"), key=lambda s: s.started_at)
        called = [e.event for e in store.events(newest.id) if e.event.kind == "tool_called"]
    assert called[-1].call.tool == "lab_status"  # type: ignore[union-attr]
    assert called[-1].result_chars == len(text) and called[-1].guard == "allow"  # type: ignore[union-attr]


async def test_sweep_reports_progress_and_every_call_is_logged(lab: VlabLayout) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    server = _server(lab)
    async with Client(server) as client:
        assert not (await client.call_tool("fingerprint_verify", {"build_id": baseline(lab)})).is_error
        res = await client.call_tool("sweep", {"densities": [6, 12], "reps": 1, "window_s": 2,
                                               "perf": False}, progress_callback=on_progress)
        assert not res.is_error, res.content
        assert [p["stations"] for p in res.structured_content["points"]] == [6, 12]  # type: ignore[index]
    messages = [m for _, _, m in seen if m]
    assert any("6 clients (1/2)" in m for m in messages) and any("window 1/1" in m for m in messages)
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        sessions = [s for s in store.sessions() if s.client == "mcp"]
        calls = [e.event.call.tool for s in sessions for e in store.events(s.id)
                 if e.event.kind == "tool_called"]
    assert "sweep" in calls and "fingerprint_verify" in calls


async def test_prompts_and_resources(lab: VlabLayout) -> None:
    async with Client(_server(lab)) as client:
        names = {p.name for p in (await client.list_prompts()).prompts}
        assert {"hunt-a-hotspot", "overnight-loop", "audit-a-session"} <= names
        prompt = await client.get_prompt("overnight-loop", {"goal": "halve the CPU"})
        assert "halve the CPU" in prompt.messages[0].content.text  # type: ignore[union-attr]
        status = await client.read_resource("labwarden://lab/status")
        assert json.loads(status.contents[0].text)["target_process"] == "stad"  # type: ignore[union-attr]
        sweeps = json.loads((await client.read_resource("labwarden://records/sweeps")).contents[0].text)  # type: ignore[union-attr]
        assert isinstance(sweeps, list)
        with pytest.raises(MCPError):  # path traversal in a template parameter never resolves
            await client.read_resource("labwarden://artifacts/prof-000000000000/..%2F..%2Flab.toml")
        with pytest.raises(MCPError, match="no artifact"):
            await client.read_resource("labwarden://artifacts/prof-000000000000/flame.svg")


async def test_flamegraph_resource(lab: VlabLayout) -> None:
    async with Client(_server(lab)) as client:
        assert not (await client.call_tool("fingerprint_verify", {"build_id": baseline(lab)})).is_error
        prof = await client.call_tool("measure", {"stations": 60, "window_s": 3, "reps": 1})
        assert not prof.is_error, prof.content
        pid = prof.structured_content["profile_id"]  # type: ignore[index]
        sym = await client.call_tool("symbolize", {"profile_id": pid})
        assert not sym.is_error, sym.content
        key = sym.structured_content["key"]  # type: ignore[index]
        svg = (await client.read_resource(f"labwarden://symbolized/{key}/flame.svg")).contents[0]
        assert "<svg" in svg.text and "dm_finalize_transaction" in svg.text  # type: ignore[union-attr]
        folded = (await client.read_resource(f"labwarden://symbolized/{key}/stacks.folded")).contents[0]
        assert "wld_ad_syncInfo" in folded.text  # type: ignore[union-attr]
        record = await client.read_resource(f"labwarden://records/profiles/{pid}")
        assert json.loads(record.contents[0].text)["stations"] == 60  # type: ignore[union-attr]


async def test_stdio(lab: VlabLayout) -> None:
    params = StdioServerParameters(command=LABWARDEN, args=["serve", "--lab", str(lab.lab_toml)],
                                   env={**os.environ})
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        assert "lab_status" in {t.name for t in tools}
        res = await client.call_tool("lab_status", {})
        assert not res.is_error and res.structured_content["target_process"] == "stad"  # type: ignore[index]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_principals(lab: VlabLayout, tmp: Path, *names: str,
                     timeout: float = 300) -> tuple[subprocess.Popen[bytes], Callable[[str], Client]]:
    """`serve --http` with a token per name (a token file in `tmp`), and a factory of SDK
    clients each acting for one of them (its bearer token)."""
    tokens = {name: secrets.token_urlsafe(24) for name in names}
    tf = tmp / "tokens"
    tf.write_text("".join(f"{n} {t}\n" for n, t in tokens.items()))
    tf.chmod(0o600)
    proc, port = _serve_http(lab, "--token-file", str(tf))
    url = f"http://127.0.0.1:{port}/mcp"

    def client(who: str) -> Client:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {tokens[who]}"}, timeout=timeout)
        return Client(streamable_http_client(url, http_client=http))

    return proc, client


def _serve_http(lab: VlabLayout, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen([LABWARDEN, "serve", "--lab", str(lab.lab_toml), "--http",
                             f"127.0.0.1:{port}", *extra], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60  # a cold start beside busy xdist workers took over 20 s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("server did not listen")


async def test_http_loopback(lab: VlabLayout) -> None:
    proc, port = _serve_http(lab)
    try:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            res = await client.call_tool("lab_status", {})
            assert not res.is_error and res.structured_content["target_process"] == "stad"  # type: ignore[index]
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", headers={"Origin": "http://evil.example",
                       "Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert r.status_code == 403
    finally:
        proc.terminate()
        proc.wait(10)


async def test_http_token_required(lab: VlabLayout, tmp_path: Path) -> None:
    token = secrets.token_urlsafe(32)
    tf = tmp_path / "token"
    tf.write_text(token)
    tf.chmod(0o600)
    proc, port = _serve_http(lab, "--token-file", str(tf))
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", headers=hdrs, json=body)
        assert r.status_code == 401 and "Bearer" in r.headers.get("www-authenticate", "")
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", headers={**hdrs, "Authorization": "Bearer nope"},
                       json=body)
        assert r.status_code == 401
        from mcp.client.streamable_http import streamable_http_client

        bearer = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=bearer)
        async with Client(transport) as client:
            assert not (await client.call_tool("lab_status", {})).is_error
    finally:
        proc.terminate()
        proc.wait(10)


def test_non_loopback_without_auth_is_refused_at_start(lab: VlabLayout) -> None:
    res = subprocess.run([LABWARDEN, "serve", "--lab", str(lab.lab_toml), "--http", "0.0.0.0:8765"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "without authentication" in res.stderr


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _perf_on(pid: int) -> list[int]:
    """perf processes attached to `pid` (perf record/stat -p PID)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"perf") and str(pid).encode() in argv:
                out.append(int(entry.name))
    return out


async def _until(pred, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    import anyio

    with anyio.move_on_after(timeout):
        while not pred():
            await anyio.sleep(0.02)
        return True
    return False


async def test_cancelled_attribution_leaves_the_suspect_running(lab: VlabLayout) -> None:
    import anyio

    stamon = int((lab.run_dir / "stamon.pid").read_text())
    async with Client(_server(lab)) as client:
        assert not (await client.call_tool("fingerprint_verify", {"build_id": baseline(lab)})).is_error
        window_s = 30
        asked = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "attribute", {"suspect": "stamon", "window_s": window_s,
                                                          "baseline_s": 1})
            assert await _until(lambda: _state(stamon) in "tT", 30), "the pause never started"
            tg.cancel_scope.cancel()  # the client gives up: MCP cancels the request
        # an order, not a time: running again before the window, which began after the call was
        # asked for, would have ended by itself (the helper's own deadline is later still)
        assert await _until(lambda: _state(stamon) not in "tT", asked + window_s - time.monotonic()), \
            "the suspect was still stopped when its window would have ended by itself"
        status = await client.call_tool("lab_status", {})
        assert not status.is_error


async def test_cancelled_sweep_leaves_no_perf_behind(lab: VlabLayout) -> None:
    import anyio

    stad = int((lab.run_dir / "stad.pid").read_text())
    async with Client(_server(lab)) as client:
        assert not (await client.call_tool("fingerprint_verify", {"build_id": baseline(lab)})).is_error
        window_s = 30
        asked = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "sweep", {"densities": [60], "reps": 1,
                                                      "window_s": window_s, "perf": True})
            assert await _until(lambda: bool(_perf_on(stad)), 40), "perf never started"
            assert list(lab.tmp_dir.glob("lw-jobs-*/*.pid")), "perf runs outside a jobs' dir"
            t0 = time.monotonic()
            tg.cancel_scope.cancel()
        # labwarden stops perf itself (DutJobs: a fresh command, TERM then KILL), not a SIGHUP
        # from the server; an order, not a time: before the window, which began after the call
        # was asked for, would have ended by itself -- perf records `sleep window_s`, so a perf
        # nobody stopped is gone only then (the stop takes well under 2 s)
        assert await _until(lambda: not _perf_on(stad), asked + window_s - time.monotonic()), \
            f"perf still on the target when its window would have ended: {_perf_on(stad)}"
        print(f"perf gone {time.monotonic() - t0:.2f} s after the cancel")
        # the cancelled window's perf.data is in its jobs' dir, removed (shielded) after its perf
        # stopped: that clean-up may still be in flight when perf is gone, the same grace for it
        assert await _until(lambda: not list(lab.tmp_dir.glob("lw-jobs-*")), 10), \
            f"a jobs' dir was left on the DUT: {list(lab.tmp_dir.rglob('lw-jobs-*/*'))}"
        # and its uprobes are removed, after its perf stat was stopped (tracefs refuses to remove
        # a probe a perf event holds open): kernel state outlives the vlab otherwise
        assert await _until(lambda: not vlab_probes(lab), 10), f"uprobes left: {vlab_probes(lab)}"
        # and the sweep's promise holds even cancelled: it leaves the DUT with no clients
        assert await _until(lambda: rpc.count(lab.socket).get("total") == 0, 10), \
            f"clients left associated: {rpc.count(lab.socket)}"
