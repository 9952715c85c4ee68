"""Tool-call overhead, measured side by side in one run.

1. guard + transcript per call over a no-op tool, against calling the function bare, with the
   fsync floor (one sqlite WAL commit with synchronous=FULL in the same directory) beside it;
2. an MCP stdio round trip of the no-op tool on labwarden's server against a bare MCPServer
   (labwarden's own stdio transport, and the SDK's beside it).
Targets: guard + transcript <= 0.1 ms p50 over the bare function; MCP round trip <= 1.1x the
bare server's (p50). Both are printed against their targets at the end.

    .venv/bin/python bench/tool_overhead.py [-n 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
import _noop

from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab import control


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def timed(n: int, fn) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(n):
        t = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - t)
    return out


IDLE_S = 0.0015
"""A server waits about this long for each next request (a stdio round trip here); after such an
idle wait the same call costs several times more on this VM (caches and CPU state gone cold)."""


async def timed_after(n: int, pause, fn) -> list[float]:  # type: ignore[no-untyped-def]
    """Like timed(), with pause() before each call, outside the timing."""
    out = []
    for i in range(n):
        pause()
        t = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - t)
    return out


def fsync_floor(d: Path, n: int) -> list[float]:
    db = sqlite3.connect(d / "floor.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (x TEXT)")
    out = []
    for _ in range(n):
        t = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t VALUES ('x')")
        db.execute("COMMIT")
        out.append(time.perf_counter() - t)
    return out


async def in_process(lab: Path, n: int, tmp: Path) -> list[tuple[str, list[float]]]:
    _noop.register()
    profile = LabProfile.from_file(lab)
    rows = []
    async with open_lab(profile, guarded=False) as ctx:
        rows.append(("bare function", await timed(n, lambda i: _noop.noop(ctx, _noop.NoopInput(n=i)))))
        rows.append(("runner, no guard, no transcript",
                     await timed(n, lambda i: call_tool(ctx, "noop", {"n": i}))))
    shm = Path("/dev/shm") / f"lw-bench-{tmp.name}.db"
    for label, db, fsync in (("runner + guard + transcript (disk)", tmp / "t.db", "changes"),
                             ("  same, transcript_fsync = every_call", tmp / "t2.db", "every_call"),
                             ("runner + guard + transcript (tmpfs)", shm, "changes")):
        async with open_lab(_noop.with_fsync(profile, fsync), transcript=db, client="bench") as ctx:
            rows.append((label, await timed(n, lambda i: call_tool(ctx, "noop", {"n": i}))))
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
    rows.append(("fsync floor: one sqlite WAL+FULL commit", fsync_floor(tmp, n)))
    async with open_lab(profile, transcript=tmp / "idle.db", client="bench") as ctx:
        rows.append((f"bare function, {IDLE_S * 1000:g} ms idle before each",
                     await timed_after(n, lambda: time.sleep(IDLE_S),
                                       lambda i: _noop.noop(ctx, _noop.NoopInput(n=i)))))
        rows.append((f"runner + guard + transcript, {IDLE_S * 1000:g} ms idle before each",
                     await timed_after(n, lambda: time.sleep(IDLE_S),
                                       lambda i: call_tool(ctx, "noop", {"n": i}))))
    return rows


ROUND = 20
"""Calls per server per interleaved round."""
TARGET_MS = 0.1
"""guard + transcript over the bare function, p50 (ms)."""
TARGET_RATIO = 1.1
"""MCP stdio round trip of labwarden / a bare MCPServer, p50."""


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


async def mcp_rtt(lab: Path, n: int, tmp: Path) -> list[tuple[str, list[float]]]:
    from mcp import Client, StdioServerParameters

    here = str(Path(__file__).parent / "_noop.py")
    servers = (("MCP stdio: bare MCPServer", [here, "bare"]),
               ("MCP stdio: labwarden, runner short-cut (its MCP layer)",
                [here, "layer", str(lab), str(tmp / "layer.db")]),
               ("MCP stdio: labwarden (guard + transcript)",
                [here, "labwarden", str(lab), str(tmp / "mcp.db"), "changes"]),
               ("  same, on the SDK's stdio transport (worker threads)",
                [here, "labwarden-sdk-stdio", str(lab), str(tmp / "mcp3.db"), "changes"]),
               ("  same, transcript_fsync = every_call",
                [here, "labwarden", str(lab), str(tmp / "mcp2.db"), "every_call"]))
    times: dict[str, list[float]] = {label: [] for label, _ in servers}
    async with contextlib.AsyncExitStack() as stack:
        clients = [(label, await stack.enter_async_context(
            Client(StdioServerParameters(command=sys.executable, args=args))))
            for label, args in servers]
        for _, client in clients:
            await client.call_tool("noop", {"n": 0})  # warm
        # interleaved in rounds, so a noisy moment hits every server alike
        for start in range(0, n, ROUND):
            for label, client in clients:
                times[label] += await timed(min(ROUND, n - start),
                                            lambda i, c=client: c.call_tool("noop", {"n": i}))
    return list(times.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=300)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lw-bench-"))
    root = tmp / "vlab"
    try:
        control.up(root)
        lab = root / "lab.toml"
        rows = asyncio.run(in_process(lab, args.n, tmp))
        rows += asyncio.run(mcp_rtt(lab, args.n, tmp))
    finally:
        control.down(root)
    table = Table(title=f"tool-call overhead, {args.n} calls each (ms)")
    for col in ("path", "p50", "p95", "mean"):
        table.add_column(col, justify="left" if col == "path" else "right")
    for label, xs in rows:
        table.add_row(label, f"{pct(xs, .5):.3f}", f"{pct(xs, .95):.3f}",
                      f"{statistics.fmean(xs) * 1000:.3f}")
    console = Console(width=140)
    console.print(table)
    med = {label: pct(xs, .5) for label, xs in rows}
    bare = med["bare function"]
    disk = med["runner + guard + transcript (disk)"] - bare
    shm = med["runner + guard + transcript (tmpfs)"] - bare
    floor = med["fsync floor: one sqlite WAL+FULL commit"]
    ratio = med["MCP stdio: labwarden (guard + transcript)"] / med["MCP stdio: bare MCPServer"]
    ratio_all = med["  same, transcript_fsync = every_call"] / med["MCP stdio: bare MCPServer"]
    layer = med["MCP stdio: labwarden, runner short-cut (its MCP layer)"] / med["MCP stdio: bare MCPServer"]
    idle = med[f"runner + guard + transcript, {IDLE_S * 1000:g} ms idle before each"] \
        - med[f"bare function, {IDLE_S * 1000:g} ms idle before each"]
    # the same ratio round by round: how much it moves with the machine's phase
    bare_rt = dict(rows)["MCP stdio: bare MCPServer"]

    def by_round(label: str) -> tuple[float, float, float]:
        lw = dict(rows)[label]
        rounds = sorted(statistics.median(lw[i:i + ROUND]) / statistics.median(bare_rt[i:i + ROUND])
                        for i in range(0, len(lw) - ROUND + 1, ROUND))
        q1, q2, q3 = statistics.quantiles(rounds, n=4)
        return q1, q2, q3

    q1, q2, q3 = by_round("MCP stdio: labwarden (guard + transcript)")
    s1, s2, s3 = by_round("  same, on the SDK's stdio transport (worker threads)")
    console.print(f"guard + transcript over the bare function: {disk:.3f} ms p50 (target <= "
                  f"{TARGET_MS:g} ms): {verdict(disk <= TARGET_MS)}")
    console.print(f"  {shm:.3f} ms on tmpfs; {idle:.3f} ms after a {IDLE_S * 1000:g} ms idle "
                  f"wait, as in a server; the fsync floor beside it is {floor:.3f} ms")
    sdk_io = med["  same, on the SDK's stdio transport (worker threads)"] / med["MCP stdio: bare MCPServer"]
    console.print(f"MCP stdio round trip: {ratio:.2f}x a bare MCPServer (target <= {TARGET_RATIO:g}x): "
                  f"{verdict(ratio <= TARGET_RATIO)}")
    console.print(f"  {sdk_io:.2f}x on the SDK's stdio transport, the bare server's own "
                  f"({verdict(sdk_io <= TARGET_RATIO)} there); round by round: median {s2:.2f}x, "
                  f"quartiles {s1:.2f}-{s3:.2f}x")
    in_server = med["MCP stdio: labwarden (guard + transcript)"] \
        - med["MCP stdio: labwarden, runner short-cut (its MCP layer)"]
    console.print(f"  round by round: median {q2:.2f}x, quartiles {q1:.2f}-{q3:.2f}x; its MCP layer "
                  f"alone {layer:.2f}x; {ratio_all:.2f}x with an fsync on every call; guard + "
                  f"transcript in the server's round trip: {in_server:.3f} ms")


if __name__ == "__main__":
    main()
