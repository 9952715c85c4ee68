"""Candidates judged per hour by the unattended loop on a lab: `labwarden loop`'s library door
with the stand-in model (tests/messages_standin.py: the model's turns are scripted, answered at
once) submitting patches and calling `experiment` on each, with the vlab profile's own
pre-registered [decision] (4 s windows, screening at 114 clients, full sweeps 18/60/114 for
survivors). Everything but the model is real.

    .venv/bin/python bench/loop_throughput.py [--lab-kind vlab|qlab]
    .venv/bin/python bench/loop_throughput.py --places 2 [--turns 4]   # a fleet: bench/fleet_throughput.py

Targets on the vlab: >= 30 candidates judged per hour with every verdict decided (improved /
regressed / same, none left unknown); loop overhead beyond windows <= 5% (the loop's own time --
model turns, dispatch, transcript, the morning report -- against the windows' time; the lab's own
steps around the windows, flash, heal and settle, are shown beside it).

`--lab-kind qlab` (issue [3/2]): a qlab on its default clock (icount under TCG), and five
candidates for its own hot path, each written as a diff (tests/qlab_patches.py): a patch that
makes every station's round trips twice (regressed), the station dump instead of three
GET_STATION round trips per station, the write-back gate (0901-like) and a lean reply
(0902-like), each submitted on the ones kept before it, then a no-op. The qlab writes no
[decision]: this run pre-registers the default rule (4 s windows, +-5%, 3..15 windows, A once
at the cap: a flash is a boot) with 18/60/114 stations and the offered-load counter. Targets:
every verdict decided, the kept stack's cut of stad CPU at 114 >= 50% with no gate failed on a
kept stage, >= 6 candidates judged per hour under TCG.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from labwarden.agent import overnight
from labwarden.agent.calibrated import CalibrationPolicy
from labwarden.agent.loop import Limits
from labwarden.agent.model import Model, ModelOptions
from labwarden.core.events import ToolCalled
from labwarden.core.experiments import Experiment
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.host.patchstore import base_of, patch_id
from labwarden.qlab import control as qlab_control
from labwarden.qlab.layout import QlabLayout
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import control

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests import qlab_patches
from tests.messages_standin import MessagesStandIn, ToolUse, Turn, from_result  # the test stand-in
from tests.patching import BULK, DROP_KEY, NO_OP, change
from tests.qlab_fixtures import loop_profile

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


QLAB_DECISION: dict[str, object] = {"window_s": 4.0, "settle_s": 5.0, "densities": [60, 114],
                                    "sweep_reps": 3, "max_windows": 9, "interleave": False,
                                    "offered_load_counter": "rpc_calls"}
"""The rule bench/decision.py --lab-kind qlab calibrated (alpha, beta, +-5%, 4 s windows), with a
cap of 9 windows (A is measured once at the cap: its median was 5 per arm), two workload points
and 3 windows each in a survivor's sweeps (the densest point's first records perf, which the
offered-load gate leaves out: with 2, one window of 4 s was left, and a window edge cutting a
cycle of six polls read +8.3%), and 5 guest s of settle (bench/qlab_noise.py: the
first window after associating reads high without it). Each flash is a boot of ~50-100 s here."""


def qlab_candidates(repo: Path) -> list[tuple[str, dict[str, object] | str]]:
    """Each kept candidate is the next one's base (the stand-in's script assumes they are kept;
    the table says whether they were). `repo`: the firmware's (a patch id hashes its base)."""
    stack: list[str] = []
    out: list[tuple[str, dict[str, object] | str]] = [
        ("pull-twice", {"diff": qlab_patches.SLOW_PULL})]
    for name, diff in (("station-dump", qlab_patches.BULK_DUMP), ("comment", qlab_patches.COMMENT),
                       ("gate-writeback", qlab_patches.GATE), ("lean-reply", qlab_patches.LEAN)):
        out.append((name, {"diff": diff, "base_patches": list(stack)}))
        if name != "comment":  # the no-op is judged where stad is busy (at ~12% CPU, the top of
            # the stack, it stayed undecided at the cap)
            stack.append(patch_id(name, diff, base_of(repo, "HEAD", stack))[0])
    return out


def script(candidates: list[tuple[str, dict[str, object] | str]], baseline: str | None = None
           ) -> list[Turn]:
    """`baseline`: the agent first proves that image runs (so an experiment on it needs no flash)."""
    turns = [Turn(tools=[ToolUse("fingerprint_verify", {"build_id": baseline})])] if baseline else []
    for name, what in candidates:
        if isinstance(what, str):
            turns.append(Turn(tools=[ToolUse("experiment", {"patch": what})]))
        else:
            turns.append(Turn(tools=[ToolUse("patch_submit", {"name": name, **what})]))
            turns.append(Turn(tools=[ToolUse("experiment", from_result("patch_id", "patch"))]))
    turns.append(Turn(text="DONE: every candidate judged."))
    return turns


async def run(lab: Path, out: Path, candidates: list[tuple[str, dict[str, object] | str]],
              verify_first: bool = False) -> tuple[float, str]:
    turns = script(candidates, LabProfile.from_file(lab).build.baseline if verify_first else None)
    with MessagesStandIn(turns) as api:
        model = Model(ModelOptions(base_url=api.url, api_key="sk-standin"))
        limits = Limits(budget_usd=50.0, max_turns=len(turns) + 2)
        t0 = time.monotonic()
        res = await overnight.run_loop(LabProfile.from_file(lab), model, goal="throughput",
                                       limits=limits, out_dir=out, resume=None,
                                       calibration=CalibrationPolicy(skip=True))  # the loop's own time
        wall = time.monotonic() - t0
    assert res.outcome.stop == "done", res.outcome
    return wall, res.session_id


def stack_cut(exps: list[Experiment]) -> str:
    """The kept stack against the first kept stage's A, at the screened point: screening windows
    carry no perf record (a full sweep's densest point records perf in its first window, which on
    the qlab's one vCPU is guest work of its own)."""
    kept = [x for x in exps if x.decision == "kept" and x.screening and x.screening.looks]
    if not kept:
        return "no kept stage"
    first, last = kept[0].screening, kept[-1].screening
    assert first is not None and last is not None
    a, b = first.final.mean_a, last.final.mean_b
    gated = all(not g.failed for x in kept for g in x.gates)
    extra = [p for p in kept[-1].base_patches if p not in {x.patch for x in kept[:-1]}]
    if extra:  # the script stacked a candidate the rule did not keep
        return (f"no kept stack measured as such: the last kept stage's B also carries {extra}, "
                f"not kept; that image read {first.stations} {a:.2f}% -> {b:.2f}% "
                f"({100 * (b - a) / a:+.1f}%)")
    return (f"kept stack {' + '.join(x.patch_name or x.patch for x in kept)}: stad CPU at "
            f"{first.stations} {a:.2f}% -> {b:.2f}% ({100 * (b - a) / a:+.1f}%, target <= -50%); "
            f"gate failed on a kept stage: {'none' if gated else 'YES'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lab-kind", choices=("vlab", "qlab"), default="vlab")
    ap.add_argument("--places", type=int, default=0,
                    help="a fleet of N vlab places (real coordinator and exporter) against one place, in "
                    "one run (bench/fleet_throughput.py); 0: one lab")
    ap.add_argument("--turns", type=int, default=None,
                    help="with --places: turns of experiments, each queueing every candidate "
                    "(default 4: bench/fleet_throughput.py)")
    args = ap.parse_args()
    kind = args.lab_kind
    if args.places:
        if kind != "vlab":
            ap.error("--places runs a fleet of vlabs: leave out --lab-kind qlab")
        from fleet_throughput import main_fleet  # this script's directory is on sys.path

        main_fleet(args.places, *([args.turns] if args.turns else []))
        return
    root = Path(tempfile.mkdtemp(prefix="lw-throughput-")) / kind
    load_before = os.getloadavg()
    if kind == "qlab":
        lab, candidates, target = root / "lab-loop.toml", [], 6  # once its repo exists
    else:
        lab, candidates, target = root / "lab.toml", CANDIDATES, 30
    try:
        if kind == "qlab":
            info = qlab_control.up(root)
            print(f"qlab up: clock {info.clock.spec}, {info.timings}")
            loop_profile(QlabLayout.at(root), "loop", QLAB_DECISION)
            candidates = qlab_candidates(Path(LabProfile.from_file(lab).build.repo))
        else:
            control.up(root)
        wall, sid = asyncio.run(run(lab, root.parent / "out", candidates, verify_first=kind == "qlab"))
    finally:
        (qlab_control.down if kind == "qlab" else control.down)(root)
    profile = LabProfile.from_file(lab)
    with TranscriptStore(profile.data_dir() / "transcripts.db") as store:
        calls = [e.event.call for e in store.events(sid)  # the agent's; nested calls are inside them
             if isinstance(e.event, ToolCalled) and e.event.parent_id is None]
    records = RecordStore(profile.data_dir())
    exps = [records.load("exp", c.result["experiment_id"], Experiment)
            for c in calls if c.tool == "experiment" and c.ok and c.result]
    console = Console(width=140)
    t = Table(title="one unattended loop, candidates in order")
    for col in ("candidate", "decision", "verdict", "A -> B %", "delta", "windows A+B", "window s",
                "lab s", "flashes"):
        t.add_column(col, justify="right")
    for x in exps:
        look = x.screening.looks[-1] if x.screening and x.screening.looks else None
        t.add_row(x.patch_name or x.patch, x.decision, look.verdict if look else "-",
                  f"{look.mean_a:.2f} -> {look.mean_b:.2f}" if look else "-",
                  f"{look.delta_pct:+.1f}%" if look else "-", f"{look.n_a}+{look.n_b}" if look else "-",
                  f"{x.cost.window_seconds:.0f}",
                  f"{x.cost.lab_seconds:.0f}", str(x.screening.flashes if x.screening else 0))
    console.print(t)
    windows = sum(x.cost.window_seconds for x in exps)
    sweeps = sum(x.cost.lab_seconds for x in exps)
    tools = sum(c.duration_s for c in calls)
    per_hour = len(exps) / wall * 3600
    # decided: a verdict, or dropped by a gate before any look (functional parity, a crash)
    undecided = [x.patch_name or x.patch for x in exps
                 if x.verdict == "unknown" or (x.verdict is None and all(g.passed for g in x.gates))]
    console.print(f"{len(exps)} candidates judged in {wall:.0f} s: {per_hour:.1f} per hour "
                  f"(target >= {target}); undecided: {undecided or 'none'}")
    if kind == "qlab":
        console.print(stack_cut(exps))
        for x in exps:
            console.print(f"  {x.patch_name or x.patch}: {x.decision} -- {x.reason[:240]}")
        console.print(f"morning summary and report: {root.parent / 'out'}")
    console.print("load average before / after: " + " / ".join(
        ", ".join(f"{v:.2f}" for v in la) for la in (load_before, os.getloadavg())))
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
