"""Soak: mixed good and bad calls from concurrent MCP clients over streamable HTTP on loopback.

A real `labwarden serve --http` on a vlab; N clients (the SDK's client, each its own MCP session)
share the calls round-robin over a mix of good calls (lab_status, resource reads) and bad ones
(unknown tool, malformed and unsafe arguments, a refused suspect, an escaping path, an oversized
argument, a lease another client holds). Checked at the end: the server stayed up; every call is
logged exactly once in its client's transcript session; every session's audit passes against
its anchor; the server's RSS is printed at the start (after a warm-up round) and the end.

    .venv/bin/python bench/soak.py [--calls 500] [--clients 8] [--timeout 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError

from labwarden.transcripts.audit import audit
from labwarden.transcripts.store import TranscriptStore

LABWARDEN = str(Path(sys.executable).parent / "labwarden")
BIG = "B" * 200_000

# (kind, name, arguments or uri, good?) -- the mix every client cycles through
MIX: list[tuple[str, str, Any, bool]] = [
    ("tool", "lab_status", {}, True),
    ("tool", "no_such_tool", {}, False),
    ("read", "", "labwarden://records/sweeps", True),
    ("tool", "associate", {"stations": True}, False),
    ("tool", "build", {"ref": "$(reboot)"}, False),
    ("tool", "lab_status", {}, True),
    ("tool", "attribute", {"suspect": "init"}, False),
    ("tool", "build", {"patches": ["../../etc/passwd"]}, False),
    ("read", "", "labwarden://artifacts/prof-000000000000/..%2F..%2Flab.toml", False),
    ("tool", "compare", {"baseline": BIG, "candidate": "swp-0"}, False),
    ("tool", "associate", {"stations": 0}, True),  # one client holds the lease; others: lease_held
    ("read", "", "labwarden://lab/status", True),
]


@dataclass
class ClientLog:
    tool_calls: int = 0
    reads: int = 0
    status_reads: int = 0
    ok: int = 0
    failed: int = 0
    session_id: str | None = None
    errors: list[str] = field(default_factory=list)


@dataclass
class SoakResult:
    calls: int
    clients: int
    seconds: float
    rss_start_kb: int
    rss_end_kb: int
    server_alive: bool
    good: int
    bad: int
    logged_exactly_once: bool
    audits_ok: int
    sessions: int
    problems: list[str]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _serve(lab_toml: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen([LABWARDEN, "serve", "--lab", str(lab_toml), "--http", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        if proc.poll() is not None:
            raise RuntimeError("the server exited at start")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not listen")


async def _one(client: Client, item: tuple[str, str, Any, bool], log: ClientLog) -> bool:
    kind, name, arg, _good = item
    if kind == "tool":
        log.tool_calls += 1
        res = await client.call_tool(name, arg)
        return not res.is_error
    if arg == "labwarden://lab/status":
        log.status_reads += 1  # runs lab_status: logged as that call
    else:
        log.reads += 1
    try:
        await client.read_resource(arg)
        return True
    except MCPError:
        return False


async def _client(url: str, indices: list[int], log: ClientLog, started: asyncio.Event) -> None:
    async with Client(url) as client:
        for n, i in enumerate(indices):
            if n == 1:
                started.set()
            if await _one(client, MIX[i % len(MIX)], log):
                log.ok += 1
            else:
                log.failed += 1
        log.reads += 1  # the read below is logged too
        events = json.loads((await client.read_resource("labwarden://transcripts/current"))
                            .contents[0].text)  # type: ignore[union-attr]
        log.session_id = events[0]["session_id"]


async def _drive(url: str, calls: int, clients: int, pid: int) -> tuple[list[ClientLog], int]:
    logs = [ClientLog() for _ in range(clients)]
    # warm-up: one round from one client (imports, first sessions), then RSS is taken
    warm = ClientLog()
    await _client(url, list(range(len(MIX))), warm, asyncio.Event())
    rss_start = rss_kb(pid)
    share = [list(range(c, calls, clients)) for c in range(clients)]
    starts = [asyncio.Event() for _ in range(clients)]
    await asyncio.gather(*(_client(url, share[c], logs[c], starts[c]) for c in range(clients)))
    return [warm, *logs], rss_start


def _check(db: Path, logs: list[ClientLog]) -> tuple[bool, int, list[str]]:
    problems: list[str] = []
    audits = 0
    with TranscriptStore(db) as store:
        for i, log in enumerate(logs):
            assert log.session_id is not None
            events = [e.event for e in store.events(log.session_id)]
            called = sum(e.kind == "tool_called" for e in events)
            read = sum(e.kind == "resource_read" for e in events)
            want_called, want_read = log.tool_calls + log.status_reads, log.reads
            if (called, read) != (want_called, want_read):
                problems.append(f"client {i}: {called} tool_called / {read} resource_read logged, "
                                f"{want_called} / {want_read} made")
            report = audit(store, log.session_id)
            if report.ok and "anchor" in report.checks:
                audits += 1
            else:
                problems.append(f"client {i}: audit {report.problems or report.checks}")
    return not problems, audits, problems


def run_soak(lab_toml: Path, db: Path, calls: int = 500, clients: int = 8,
             timeout: float = 300) -> SoakResult:
    proc, port = _serve(lab_toml)
    url = f"http://127.0.0.1:{port}/mcp"
    t0 = time.monotonic()
    try:
        logs, rss_start = asyncio.run(asyncio.wait_for(_drive(url, calls, clients, proc.pid), timeout))
        seconds = time.monotonic() - t0
        alive = proc.poll() is None
        rss_end = rss_kb(proc.pid) if alive else 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # sessions end, anchors are written
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    once, audits, problems = _check(db, logs)
    good = sum(1 for i in range(calls) if MIX[i % len(MIX)][3])
    return SoakResult(calls=calls, clients=clients, seconds=round(seconds, 1), rss_start_kb=rss_start,
                      rss_end_kb=rss_end, server_alive=alive, good=good, bad=calls - good,
                      logged_exactly_once=once, audits_ok=audits, sessions=len(logs),
                      problems=problems)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    from labwarden.vlab import control

    with tempfile.TemporaryDirectory(prefix="lw-soak-") as tmp:
        root = Path(tmp) / "vlab"
        control.up(root)
        try:
            r = run_soak(root / "lab.toml", root / "data" / "transcripts.db", args.calls,
                         args.clients, args.timeout)
        finally:
            control.down(root)
    print(f"soak: {r.calls} calls ({r.good} good, {r.bad} bad) from {r.clients} clients over HTTP "
          f"in {r.seconds} s; server alive: {r.server_alive}")
    print(f"logged exactly once: {r.logged_exactly_once}; audits ok with anchors: {r.audits_ok} of "
          f"{r.sessions} sessions")
    print(f"server RSS: start {r.rss_start_kb / 1024:.1f} MiB, end {r.rss_end_kb / 1024:.1f} MiB "
          f"({(r.rss_end_kb - r.rss_start_kb) / 1024:+.1f} MiB)")
    for p in r.problems:
        print("problem:", p)
    sys.exit(0 if r.server_alive and r.logged_exactly_once and not r.problems else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
