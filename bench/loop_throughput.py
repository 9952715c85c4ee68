"""Candidates judged per hour by the unattended loop on the vlab: `labwarden loop`'s library door
with the stand-in model (tests/messages_standin.py: the model's turns are scripted, answered at
once) submitting patches and calling `experiment` on each, with the vlab profile's own
pre-registered [decision] (4 s windows, screening at 114 clients, full sweeps 18/60/114 for
survivors). Everything but the model is real.

    .venv/bin/python bench/loop_throughput.py

Targets: >= 30 candidates judged per hour with every verdict decided (improved / regressed /
same, none left unknown); loop overhead beyond windows <= 5% (the loop's own time -- model turns,
dispatch, transcript, the morning report -- against the windows' time; the lab's own steps
around the windows, flash, heal and settle, are shown beside it).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.agent import overnight
from labwarden.agent.loop import Limits
from labwarden.agent.model import Model, ModelOptions
from labwarden.core.events import ToolCalled
from labwarden.core.experiments import Experiment
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import control

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.messages_standin import MessagesStandIn, ToolUse, Turn, from_result  # the test stand-in
from tests.patching import BULK, DROP_KEY, NO_OP, change

CANDIDATES: list[tuple[str, dict[str, object] | str]] = [
    ("bulk-pull", {"diff": change("hal.c", *BULK)}),
    ("comment", {"diff": change("wld.c", *NO_OP)}),
    ("0905", "0905"),  # shipped: a cleanup on a path the vlab never takes
    ("brief-13", {"diff": change("wld.c", *DROP_KEY, patches=("0902",)), "base_patches": ["0902"]}),
    ("double-sync", {"diff": change("wld.c", "wld_ad_syncStats(ad);",
                                    "wld_ad_syncStats(ad);\n\t\twld_ad_syncStats(ad);")}),
    ("0901", "0901"),  # shipped: gate the static write-back
    ("comment-2", {"diff": change("wld.c", "/* ---- driver pull ---- */",
                                  "/* ---- the driver pull ---- */")}),
    ("0100", "0100"),  # shipped: the trace short-circuit, without its config lever
]


def script() -> list[Turn]:
    turns: list[Turn] = []
    for name, what in CANDIDATES:
        if isinstance(what, str):
            turns.append(Turn(tools=[ToolUse("experiment", {"patch": what})]))
        else:
            turns.append(Turn(tools=[ToolUse("patch_submit", {"name": name, **what})]))
            turns.append(Turn(tools=[ToolUse("experiment", from_result("patch_id", "patch"))]))
    turns.append(Turn(text="DONE: every candidate judged."))
    return turns


async def run(lab: Path, out: Path) -> tuple[float, str]:
    turns = script()
    with MessagesStandIn(turns) as api:
        model = Model(ModelOptions(base_url=api.url, api_key="sk-standin"))
        limits = Limits(budget_usd=50.0, max_turns=len(turns) + 2)
        t0 = time.monotonic()
        res = await overnight.run_loop(LabProfile.from_file(lab), model, goal="throughput",
                                       limits=limits, out_dir=out, resume=None)
        wall = time.monotonic() - t0
    assert res.outcome.stop == "done", res.outcome
    return wall, res.session_id


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="lw-throughput-")) / "vlab"
    try:
        control.up(root)
        wall, sid = asyncio.run(run(root / "lab.toml", root.parent / "out"))
    finally:
        control.down(root)
    profile = LabProfile.from_file(root / "lab.toml")
    with TranscriptStore(profile.data_dir() / "transcripts.db") as store:
        calls = [e.event.call for e in store.events(sid) if isinstance(e.event, ToolCalled)]
    records = RecordStore(profile.data_dir())
    exps = [records.load("exp", c.result["experiment_id"], Experiment)
            for c in calls if c.tool == "experiment" and c.ok and c.result]
    console = Console(width=140)
    t = Table(title="one unattended loop, candidates in order")
    for col in ("candidate", "decision", "verdict", "windows A+B", "window s", "lab s", "flashes"):
        t.add_column(col, justify="right")
    for x in exps:
        look = x.screening.looks[-1] if x.screening and x.screening.looks else None
        t.add_row(x.patch_name or x.patch, x.decision, look.verdict if look else "-",
                  f"{look.n_a}+{look.n_b}" if look else "-", f"{x.cost.window_seconds:.0f}",
                  f"{x.cost.lab_seconds:.0f}", str(x.screening.flashes if x.screening else 0))
    console.print(t)
    windows = sum(x.cost.window_seconds for x in exps)
    sweeps = sum(x.cost.lab_seconds for x in exps)
    tools = sum(c.duration_s for c in calls)
    per_hour = len(exps) / wall * 3600
    # decided: a verdict, or dropped by a gate before any look (functional parity, a crash)
    undecided = [x.patch_name or x.patch for x in exps
                 if x.verdict == "unknown" or (x.verdict is None and all(g.passed for g in x.gates))]
    console.print(f"{len(exps)} candidates judged in {wall:.0f} s: {per_hour:.1f} per hour (target >= 30); "
                  f"undecided: {undecided or 'none'}")
    console.print(f"screening windows {windows:.0f} s; experiments {sweeps:.0f} s (windows, flashes, heals, "
                  f"settles, full sweeps and gates of survivors); every tool call {tools:.0f} s")
    loop_own = wall - tools
    console.print(f"loop overhead beyond the tool calls (model turns, dispatch, transcript, report): "
                  f"{loop_own:.1f} s = {100 * loop_own / windows:.1f}% of window time (target <= 5%)")
    console.print(f"all-in, everything but the screening windows: {wall - windows:.0f} s = "
                  f"{100 * (wall - windows) / windows:.0f}% of window time "
                  f"(median experiment {statistics.median(x.cost.lab_seconds for x in exps):.0f} s)")


if __name__ == "__main__":
    main()
