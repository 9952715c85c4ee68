"""Token economy: what a model reads. (1) `tools/list` per shipped lab kind -- bytes of the
JSON-RPC result labwarden's MCP server sends (and bytes/4 tokens), beside the SDK's default
publication of all the registry's tools; a client sends it to its model on every turn. Targets:
<= 24 KB for the second firmware's (logfilt) lab, <= 40 KB for the vlab's. (2) The demo story:
characters (and chars/4 tokens) of every tool result an agent would read, per tool and in total.
Targets: no single result over 2,000 tokens; the whole story under 30,000.

    .venv/bin/python bench/token_economy.py                       # both (runs the demo story)
    .venv/bin/python bench/token_economy.py --lists-only          # (1) only: no lab is brought up
    .venv/bin/python bench/token_economy.py --db DB --session ID  # (2) from a finished run's transcript
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.cli.run import execute
from labwarden.lab.config import LabProfile
from labwarden.playbook import model
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import control

PLAYBOOK = Path(__file__).resolve().parent.parent / "playbooks" / "vlab-hotspot.toml"
LIST_TARGET = {"logfilt": 24_000, "vlab": 40_000}
"""tools/list bytes per lab kind (issue [3/6]: ~6k and ~10k tokens)."""


def _list_bytes(tools: list) -> int:  # type: ignore[type-arg]
    """Bytes of a tools/list result as the SDK serializes it (aliases, no nulls, compact)."""
    body = {"tools": [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]}
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())


async def tool_lists(root: Path) -> list[tuple[str, int, int, int, int]]:
    """(lab kind, tools listed, bytes, all tools, bytes of the SDK's default publication)."""
    from mcp.server.mcpserver import MCPServer

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from labwarden.server import tools
    from labwarden.server.app import build_server
    from labwarden.tools import registry
    from tests import labkinds

    default = MCPServer(name="all")
    tools.register(default, registry.TOOLS.values())
    every = await MCPServer.list_tools(default)
    rows = []
    for kind in labkinds.KINDS:
        listed = await build_server(labkinds.profile(kind, root / kind)).list_tools()
        rows.append((kind, len(listed), _list_bytes(listed), len(every), _list_bytes(every)))
    return rows


def show_tool_lists(console: Console) -> None:
    rows = asyncio.run(tool_lists(Path(tempfile.mkdtemp(prefix="lw-lists-"))))
    table = Table(title="tools/list per lab kind (tokens = ceil(bytes / 4))")
    for col in ("lab kind", "tools", "bytes", "tokens", "target", "all tools, SDK default: bytes"):
        table.add_column(col, justify="left" if col == "lab kind" else "right")
    for kind, n, size, n_all, size_all in rows:
        target = LIST_TARGET.get(kind)
        verdict = "" if target is None else f"<= {target // 1000} KB: {'met' if size <= target else 'MISSED'}"
        table.add_row(kind, str(n), str(size), str(-(-size // 4)), verdict, f"{n_all}: {size_all}")
    console.print(table)


def run_demo() -> tuple[Path, str]:
    root = Path(tempfile.mkdtemp(prefix="lw-tokens-")) / "vlab"
    try:
        control.up(root)
        book = model.load(PLAYBOOK, {"window_s": 4, "reps": 3})  # what `make demo` runs
        rec = asyncio.run(execute(LabProfile.from_file(root / "lab.toml"), book, Console(stderr=True)))
        Console().print(f"the demo story: {len(rec.steps)} steps in {rec.duration_s:.0f} s"
                        + ("" if rec.ok else f", stopped at {rec.stopped_at}")
                        + (f"; unmet: {[e for s in rec.steps for e in s.expectations]}"
                           if any(s.expectations for s in rec.steps) else ""))
    finally:
        control.down(root)
    assert rec.session_id is not None
    return root / "data" / "transcripts.db", rec.session_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path)
    ap.add_argument("--session")
    ap.add_argument("--lists-only", action="store_true", help="only the tools/list sizes")
    args = ap.parse_args()
    show_tool_lists(Console(width=120))
    if args.lists_only:
        return
    db, sid = (args.db, args.session) if args.db and args.session else run_demo()
    per: dict[str, list[int]] = {}
    with TranscriptStore(db) as store:
        for ev in store.events(sid):
            if ev.event.kind == "tool_called":
                per.setdefault(ev.event.call.tool, []).append(ev.event.result_chars)
    table = Table(title=f"tool results of session {sid} (tokens = ceil(chars / 4))")
    for col in ("tool", "calls", "chars total", "chars max", "tokens max", "tokens total"):
        table.add_column(col, justify="left" if col == "tool" else "right")
    total = biggest = 0
    for tool, sizes in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        tmax, ttot = -(-max(sizes) // 4), sum(-(-s // 4) for s in sizes)
        total += ttot
        biggest = max(biggest, tmax)
        table.add_row(tool, str(len(sizes)), str(sum(sizes)), str(max(sizes)), str(tmax), str(ttot))
    console = Console(width=120)
    console.print(table)
    console.print(f"largest single result: {biggest} tokens (target <= 2000: "
                  f"{'met' if biggest <= 2000 else 'MISSED'}); whole story: {total} tokens "
                  f"(target < 30000: {'met' if total < 30000 else 'MISSED'})")


if __name__ == "__main__":
    main()
