"""Token economy of the demo story: characters (and chars/4 tokens) of every tool result an agent
would read, per tool and in total. Targets: no single result over 2,000 tokens; the whole story
under 30,000.

    .venv/bin/python bench/token_economy.py                       # runs the demo story (as make demo does)
    .venv/bin/python bench/token_economy.py --db DB --session ID  # reads a finished run's transcript
"""

from __future__ import annotations

import argparse
import asyncio
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
    args = ap.parse_args()
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
