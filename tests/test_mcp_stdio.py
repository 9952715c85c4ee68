"""labwarden's stdio transport (server/stdio.py) on real pipes, in a child process: it serves
without worker threads, keeps stray prints off the wire, carries messages larger than a pipe's
buffer, and gives the descriptors back as it found them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ECHO = """
import asyncio, os, sys, threading
from labwarden.server.stdio import stdio_streams

async def main():
    threads = []
    async with stdio_streams() as (read, write):
        async with write:  # closed at the end, as the server's run loop does
            async for msg in read:
                threads.append(threading.active_count())
                print("a stray print", flush=True)  # fd 1 is diverted to stderr while serving
                await write.send(msg)
    await asyncio.sleep(0)
    print(json.dumps({"threads": threads, "blocking": [os.get_blocking(0), os.get_blocking(1)]}),
          flush=True)

import json
asyncio.run(main())
"""


def _run(stdin: int | None, payload: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run([sys.executable, "-c", ECHO], input=payload if stdin is None else None,
                          stdin=stdin, capture_output=True, timeout=60, env=env)


def _messages(n: int, big: int) -> bytes:
    """n JSON-RPC notifications, one line each; the second carries `big` characters."""
    msgs = [{"jsonrpc": "2.0", "method": "notifications/message",
             "params": {"level": "info", "data": "x" * (big if i == 1 else 10), "i": i}}
            for i in range(n)]
    return b"".join(json.dumps(m).encode() + b"\n" for m in msgs)


def test_pipes_are_served_from_the_event_loop_without_threads() -> None:
    payload = _messages(3, 300_000)  # one line larger than a pipe's 64 KiB buffer
    res = _run(None, payload)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    lines = res.stdout.decode().splitlines()
    echoed = [json.loads(ln) for ln in lines[:-1]]
    assert [m["params"]["i"] for m in echoed] == [0, 1, 2]
    assert len(echoed[1]["params"]["data"]) == 300_000
    after = json.loads(lines[-1])
    assert after["threads"] == [1, 1, 1]  # the SDK's transport runs a reader and a writer thread
    assert after["blocking"] == [True, True]  # as the pipes were handed over
    assert res.stderr.decode().count("a stray print") == 3  # never on the wire


def test_a_file_on_stdin_keeps_the_sdk_transport() -> None:
    payload = _messages(2, 10)
    with tempfile.TemporaryFile() as f:
        f.write(payload)
        f.seek(0)
        res = _run(f.fileno(), b"")
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    lines = res.stdout.decode().splitlines()
    assert [json.loads(ln)["params"]["i"] for ln in lines[:-1]] == [0, 1]
    assert all(n > 1 for n in json.loads(lines[-1])["threads"])  # the SDK's worker threads
