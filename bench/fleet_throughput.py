"""Candidates judged per hour by the unattended loop on a fleet of vlabs against one place (what
`bench/loop_throughput.py --places N` runs): `labwarden loop`'s library door
with the stand-in model (tests/messages_standin.py: the model's turns are scripted, answered at
once) submitting patches and calling `experiment` on each, with the vlab profile's own
pre-registered [decision] (4 s windows, screening at 114 clients, full sweeps 18/60/114 for
survivors). Everything but the model is real.

    .venv/bin/python bench/loop_throughput.py --places 2 [--turns 4]

With --places N: a fleet of N vlabs as places of a real labgrid coordinator and exporter
(`vlab up --places N`); the same candidates judged by a loop on all N places and by a loop on
one of them, one after the other in this run, each paying its own builds and sweeps of A. Each
loop runs a night of `--turns` turns (default 4: ~20 minutes on two places, ~40 on one), each
queueing every candidate as parallel tool calls (4 per place on two places, as the kickoff
asks): each place takes the next as it comes free, a turn comes back once a place idles
with its last calls still running, a keep is reproduced on another place first. Target: >= 1.8x
candidates judged per hour with 2 places, every verdict decided, every keep reproduced on the
other place, each loop's transcript audited.

One lab's throughput (and the qlab's) is bench/loop_throughput.py without --places.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from labwarden.agent import overnight
from labwarden.agent.loop import Limits
from labwarden.agent.model import Model, ModelOptions
from labwarden.core.events import ToolCalled
from labwarden.core.experiments import Experiment
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.fleetdir import FleetDir, place_names
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab.layout import VlabLayout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# one lab's loop judges the same candidates (this script's directory is on sys.path)
from loop_throughput import CANDIDATES

from tests.messages_standin import Body, MessagesStandIn, ToolUse, Turn  # the test stand-in

DEFAULT_TURNS = 4
"""Turns of experiments in a run: a night is many. From the second on, how a turn fills the places
the last one's calls leave idle is measured; the end of the night (the last candidate, or the
last keep's reproduction and sweep, on one place while the others have nothing left: 72-100 s
on two places in the runs of 2026-11-27) is paid once per night, here once for 32 candidates.
With 2 turns (16 candidates) that end alone weighed ~6% of the fleet's place-seconds, and the
runs read 1.77x and 1.96x; a night of ~8 hours pays it once for several hundred."""


def submitted(i: int) -> Callable[[Body], dict[str, Any]]:
    """{"patch": the i-th patch id of the first turn's patch_submit results} (any later turn)."""
    def pick(body: Body) -> dict[str, Any]:
        for msg in body["messages"]:
            blocks = msg["content"] if msg["role"] == "user" and isinstance(msg["content"], list) else []
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if results and "patch_id" in results[0]["content"][0]["text"]:
                return {"patch": json.loads(results[i]["content"][0]["text"])["patch_id"]}
        raise AssertionError("no patch_submit results in the request")
    return pick


def fleet_script(turns: int = DEFAULT_TURNS) -> list[Turn]:
    """A fleet's night: every patch submitted in one turn, then `turns` turns that each queue
    every candidate's experiment as parallel tool calls (8 candidates: 4 per place on two
    places, as the loop's kickoff asks) -- the places take them as they come free, and a turn
    comes back once a place idles with its last calls still running (agent/loop.py), so the
    next turn's experiments fill that place. Two "DONE" turns: the second answers the loop's
    message with the results that finished after the first."""
    submits = [(name, what) for name, what in CANDIDATES if not isinstance(what, str)]
    script = [Turn(tools=[ToolUse("patch_submit", {"name": name, **what}) for name, what in submits])]
    uses: list[ToolUse] = []
    for name, what in CANDIDATES:
        if isinstance(what, str):
            uses.append(ToolUse("experiment", {"patch": what}))
        else:
            uses.append(ToolUse("experiment", submitted([n for n, _ in submits].index(name))))
    script += [Turn(tools=list(uses)) for _ in range(turns)]
    script += [Turn(text="DONE: every candidate judged."),
               Turn(text="DONE: every candidate judged, the late ones too.")]
    return script


async def run_fleet(lab: Path, out: Path, goal: str, turns_n: int = DEFAULT_TURNS) -> tuple[float, str]:
    turns = fleet_script(turns_n)
    with MessagesStandIn(turns) as api:
        model = Model(ModelOptions(base_url=api.url, api_key="sk-standin"))
        limits = Limits(budget_usd=50.0, max_turns=len(turns) + 2)
        t0 = time.monotonic()
        res = await overnight.run_loop(LabProfile.from_file(lab), model, goal=goal, limits=limits,
                                       out_dir=out, resume=None)
        wall = time.monotonic() - t0
    assert res.outcome.stop == "done", res.outcome
    return wall, res.session_id


def fleet_experiments(profile: LabProfile, sid: str) -> list[Experiment]:
    records = RecordStore(profile.data_dir())
    exps = [records.load("exp", i, Experiment) for i in records.ids("exp")]
    return [x for x in exps if x.session_id == sid]


def fleet_up(root: Path, places: int) -> Path:
    from labwarden.vlab import fleet

    return Path(fleet.up(root, places, progress=lambda m: print(m, flush=True)).lab_toml)


def fleet_down(root: Path) -> None:
    from labwarden.vlab import fleet

    fleet.down(root)


def one_place_profile(lab: Path) -> Path:
    """The fleet's profile narrowed to its first place (the same DUT, paths and rule)."""
    text = lab.read_text()
    places = json.loads(re.search(r"^places = (.*)$", text, flags=re.M).group(1))  # type: ignore[union-attr]
    one = lab.with_name("lab-one-place.toml")
    one.write_text(re.sub(r"^places = .*$", f"places = {json.dumps(places[:1])}", text, count=1,
                          flags=re.M))
    return one


def host_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all the host's CPUs so far (/proc/stat's first line)."""
    ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


def place_busy_s(store: TranscriptStore, sid: str) -> dict[str, float]:
    """Seconds each place had work running on it: the union of the spans of its innermost calls
    (those with no nested call), from the transcript. Not the outer calls': an experiment is
    stamped with its first place for its whole span, also while it waits for another place to
    reproduce a keep, when its first place may have nothing to do."""
    calls = [stored.event for stored in store.events(sid) if isinstance(stored.event, ToolCalled)]
    parents = {ev.parent_id for ev in calls if ev.parent_id}
    spans: dict[str, list[tuple[float, float]]] = {}
    for ev in calls:
        if ev.place and ev.call.id not in parents:
            spans.setdefault(ev.place, []).append((ev.call.started_at.timestamp(), ev.ts.timestamp()))
    busy = {}
    for place, ss in spans.items():
        total, end = 0.0, float("-inf")
        for s, e in sorted(ss):
            if e > end:
                total += e - max(s, end)
                end = e
        busy[place] = total
    return busy


def set_aside_run(profile: LabProfile, builds: Path, builds_before: set[str], n: int) -> None:
    """Move what the loop that just ran left for the next to reuse out of its way: its experiment
    and sweep records (to records/exp-run-N, swp-run-N), so the next loop finds no sweep of A to
    reuse and pays its own places' sweeps of A, as a night does (tools/experiment._known_a_sweep
    reads both: an experiment's sweeps, then any sweep of the build on the place taken with the
    experiment's settings -- which is how, with only the experiments moved, the one-place loop
    took the fleet's sweep of A on vlab-0 and skipped its own, 47 s of 497 place-s in the first
    run of 2026-11-27); the submitted patches (DATA/patches-run-N) and the candidates' builds
    on the first place (to builds-run-N beside `builds`), so the one-place loop submits and
    builds its candidates as the fleet did -- with them cached it paid 0.2 s for its five
    patch_submit calls where the fleet paid 3.3 s, and its gaps before a flash (the build) were
    0.5-0.8 s where the fleet's were 1-4.5 s (the run of 2026-11-27 17:54). The builds from
    before the first loop (A's, made by `vlab up`) stay for both."""
    records = profile.data_dir() / "records"
    for kind in ("exp", "swp"):
        if (records / kind).is_dir():
            (records / kind).rename(records / f"{kind}-run-{n}")
    patches = profile.data_dir() / "patches"  # a new patch is checked (~0.5 s), a known one not
    if patches.is_dir():
        patches.rename(patches.with_name(f"patches-run-{n}"))
    aside = builds.with_name(f"builds-run-{n}")
    for build in sorted(builds.iterdir()):
        if build.name not in builds_before:
            aside.mkdir(exist_ok=True)
            build.rename(aside / build.name)


def main_fleet(places: int, turns: int = DEFAULT_TURNS) -> None:
    """N places against one, in the same run: the N-place loop first, then the one-place loop
    on the first place, each paying its own sweeps of A and builds of its candidates
    (set_aside_run)."""
    from labwarden.transcripts.audit import audit

    root = Path(tempfile.mkdtemp(prefix="lw-fleet-throughput-")) / "vlab"
    rows: list[tuple[int, float, list[Experiment], bool, float, dict[str, float]]] = []
    sweeps: dict[int, int] = {}  # full sweeps per loop: a fleet should sweep A no more than one place
    try:
        fleet = fleet_up(root, places)
        one = one_place_profile(fleet)
        builds = VlabLayout.at(FleetDir.at(root).place_dir(place_names("vlab", 1)[0])).builds
        builds_before = {b.name for b in builds.iterdir()}
        for n, lab in ((places, fleet), (1, one)):
            busy0, total0 = host_busy()
            wall, sid = asyncio.run(run_fleet(lab, root.parent / f"out-{n}", f"fleet throughput {n}",
                                              turns))
            busy1, total1 = host_busy()
            profile = LabProfile.from_file(lab)
            with TranscriptStore(profile.data_dir() / "transcripts.db") as store:
                ok = audit(store, sid).ok
                places_busy = place_busy_s(store, sid)
                sweeps[n] = sum(1 for e in store.events(sid) if isinstance(e.event, ToolCalled)
                                and e.event.call.tool == "sweep")
            rows.append((n, wall, fleet_experiments(profile, sid), ok,
                         (busy1 - busy0) / max(1, total1 - total0), places_busy))
            set_aside_run(profile, builds, builds_before, n)
    finally:
        fleet_down(root)
    console = Console(width=160)
    t = Table(title="one unattended loop per fleet size, same candidates")
    for col in ("candidate", "places", "decision", "verdict", "place", "reproduced on", "again",
                "screening windows", "lab s"):
        t.add_column(col, justify="right")
    for n, _, exps, _ok, _busy, _places in rows:
        for x in exps:
            rep = x.reproduction
            again = rep.screening.final.verdict if rep and rep.screening and rep.screening.looks else "-"
            t.add_row(x.patch_name or x.patch, str(n), x.decision, x.verdict or "-", x.place or "-",
                      (rep.place or "-") if rep else "-", again,
                      str(len(x.screening.a.values) + len(x.screening.b.values)) if x.screening else "-",
                      f"{x.cost.lab_seconds:.0f}")
    console.print(t)
    s = Table(title="candidates judged per hour")
    for col in ("places", "candidates", "wall s", "per hour", "undecided", "keeps", "keeps reproduced "
                "on another place", "full sweeps", "audit", "host CPU busy",
                "place-s busy (share of wall)"):
        s.add_column(col, justify="right")
    rate = {}
    for n, wall, exps, ok, busy, places_busy in rows:
        rate[n] = len(exps) / wall * 3600
        undecided = [x.patch_name or x.patch for x in exps if x.decision == "failed"
                     or x.verdict == "unknown"]
        kept = [x for x in exps if x.decision == "kept"]
        elsewhere = [x for x in kept if x.reproduction and x.reproduction.reproduced
                     and x.reproduction.place != x.place]
        s.add_row(str(n), str(len(exps)), f"{wall:.0f}", f"{rate[n]:.1f}",
                  ", ".join(undecided) or "none", str(len(kept)), f"{len(elsewhere)}/{len(kept)}",
                  str(sweeps[n]), "ok" if ok else "FAILED", f"{busy:.0%}",
                  f"{sum(places_busy.values()):.0f} ({sum(places_busy.values()) / (wall * n):.0%})")
    console.print(s)
    # the ratio is N x (one place's place-seconds / the fleet's) x (the fleet's busy share / one
    # place's): N places lose the work a fleet adds (screening windows that vary by chance, or
    # are noisier with every CPU of this host holding a DUT; a sweep of A where a survivor found
    # none to wait for) and the time a place sits idle (at the end of the queue, when the other
    # runs the last candidate or a keep's reproduction)
    work = {n: sum(pb.values()) for n, _, _, _, _, pb in rows}
    console.print(f"place-seconds of work: {work[places]:.0f} on {places} places, {work[1]:.0f} on one "
                  f"({work[places] / max(work[1], 1e-9):.2f}x the work for the same candidates)")
    # and the host's own ceiling: one place already keeps `one_busy` of all CPUs busy
    one_busy = rows[-1][4]
    console.print(f"host CPU busy with one place: {one_busy:.0%} of {os.cpu_count()} CPUs, so this "
                  f"host allows at most {min(places, 1 / max(one_busy, 1e-9)):.2f}x with {places} places")
    console.print(f"{places} places vs 1: {rate[places] / rate[1]:.2f}x candidates per hour (target >= 1.8x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--places", type=int, default=2, help="vlab places in the fleet (>= 2)")
    parser.add_argument("--turns", type=int, default=DEFAULT_TURNS,
                        help="turns of experiments, each queueing every candidate")
    args = parser.parse_args()
    main_fleet(args.places, args.turns)


if __name__ == "__main__":
    main()
