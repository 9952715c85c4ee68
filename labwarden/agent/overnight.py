"""The unattended patch-measure loop (the library half of `labwarden loop`): the model works
through the lab's tools until it declares `DONE:`, or the budget, the deadline or the turn cap
stops it; then OUT/summary.md and OUT/report.html (the full report: curves, flame graphs, the
experiment ledger) are written. The model API is retried with backoff until the deadline.

A crashed run resumes by itself: the same command line (same goal, same lab profile) finds the
newest loop session of that goal; if it never wrote its stop note and its process is gone, the
run continues it from its transcript in a new session (`resume=SESSION` names one explicitly).
What it shows while it works is up to the caller's hooks (labwarden/cli/agent.py prints them).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from labwarden.agent import calibrated, summary
from labwarden.agent.loop import (
    CONFIG,
    STATE,
    STOP,
    Agent,
    Hooks,
    Limits,
    Message,
    Outcome,
    resumed_messages,
    saved_state,
    take_over_lease,
)
from labwarden.agent.model import Model
from labwarden.core.events import Note
from labwarden.core.usage import Usage
from labwarden.lab.config import LabProfile
from labwarden.prompts import load, prompt_dir
from labwarden.runtime.fleet import PlacePool, is_fleet, open_fleet
from labwarden.runtime.session import LabSession, open_lab
from labwarden.tools import registry
from labwarden.tools.context import ProgressFn
from labwarden.transcripts import pricing
from labwarden.transcripts.store import TranscriptError, TranscriptStore

PATIENCE = timedelta(minutes=30)
"""How long the model API is retried without a deadline (with one, until the deadline)."""
MIN_TURN = Usage(input_tokens=1500, output_tokens=300, cache_read_input_tokens=20_000)
"""The cheapest model call a loop makes (a tool result in, a tool call out, the cached system
prompt, tools and history re-read): what sizes --max-turns from the budget."""
TURNS_WITHOUT_BUDGET = 60
RESUMABLE = frozenset({"api_unavailable"})
"""Stops that did not finish the work: the same command line continues such a run too."""

StartFn = Callable[[str, list[str]], None]
"""Told the new session's id and the sessions it resumes (oldest first), once the run starts."""


def parse_until(text: str, now: datetime | None = None) -> datetime:
    """HH:MM in local time, today -- or tomorrow if that has passed. Raises ValueError."""
    now = now or datetime.now().astimezone()
    hh, mm = text.split(":")
    t = now.replace(hour=int(hh), minute=int(mm), second=0, microsecond=0)
    return t if t > now else t + timedelta(days=1)


def system_prompt(goal: str, profile: LabProfile) -> str:
    """The overnight-loop prompt for this lab (it names only the tools the lab lists)."""
    tools = [spec.name for spec in registry.listed(profile)]
    return load(prompt_dir() / "overnight-loop.md").render(tools, goal=goal)


def default_goal() -> str:
    """The overnight-loop prompt's default goal (used when neither a goal nor a resume is given)."""
    return str(load(prompt_dir() / "overnight-loop.md").arguments[0]["default"])


def turns_for(budget_usd: float | None, model: str) -> int:
    """--max-turns when none is given: as many of the cheapest calls as the budget pays for
    (a safety cap that the dollar budget, not a constant, sizes), within [20, 5000]."""
    if budget_usd is None:
        return TURNS_WITHOUT_BUDGET
    floor = pricing.cost(model, MIN_TURN).total_usd
    return max(20, min(5000, int(budget_usd / floor))) if floor > 0 else 5000


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unfinished(store: TranscriptStore, goal: str, lab: str | None, *, skip: str) -> str | None:
    """The session to resume for this goal and lab: the newest loop session that recorded this
    goal and lab, if it never wrote its stop note (or stopped because the API stayed away) and
    its process (on this host) is gone.
    Raises TranscriptError when that run is still alive. `skip`: the session just started."""
    for info in store.sessions():
        if info.client != "loop" or info.id == skip:
            continue
        config, stopped, started = None, False, False
        for stored in store.events(info.id):
            ev = stored.event
            if isinstance(ev, Note) and ev.author == CONFIG:
                config = json.loads(ev.text)
            elif isinstance(ev, Note) and ev.author == STOP:
                stopped = json.loads(ev.text).get("stop") not in RESUMABLE
            elif isinstance(ev, Note) and ev.author == STATE:
                started = True
        if config is None or config.get("goal") != goal or config.get("lab") != lab:
            continue
        if stopped or not started:
            return None  # the newest run of this goal finished (or never began): start afresh
        pid, host = config.get("pid"), config.get("host")
        if host == socket.gethostname() and isinstance(pid, int) and pid != os.getpid() and _alive(pid):
            raise TranscriptError(f"a loop with this goal is running: session {info.id}, pid {pid}",
                                  "wait for it, or stop it first (a second one would fight it "
                                  "for the DUT)")
        return info.id
    return None


QUEUE_PER_PLACE = 4
"""Experiments the kickoff asks for per place in one turn on a fleet. A turn ends when its last
experiment does, so the places that finish first idle until then: about half a candidate's time
on one place per turn, however many it held (list scheduling of unequal jobs; 14-52 s in the
8-candidate runs of bench/fleet_throughput.py, which queues 4 per place). One per place would
pay that on every candidate or two; 4 pays it once per 4."""


def kickoff(goal: str, limits: Limits, places: list[str] | None = None) -> str:
    budget = f"${limits.budget_usd:g}" if limits.budget_usd is not None else "the lab profile's"
    until = f"{limits.until:%Y-%m-%d %H:%M %Z}" if limits.until else "none"
    fleet = (f"The lab is a fleet of {len(places)} places ({', '.join(places)}): call `experiment` "
             "for several candidates at once, as parallel tool calls in one turn -- each runs on "
             "the first free place (A and B on one board), and a keep is reproduced on another "
             f"place first. Queue about {QUEUE_PER_PLACE} per place in a turn (here "
             f"{QUEUE_PER_PLACE * len(places)}): the turn's results come back together once the "
             "last has finished, and a place that finishes early idles until then -- the longer "
             "the queue, the smaller that share of the turn.\n"
             if places else "")
    return (f"Goal: {goal}\nBudget: {budget} for model calls. Deadline: {until}.\n{fleet}"
            "Start with `lab_status`, then work the loop. Nobody is watching: decide for yourself, "
            "and end with `DONE:` and the summary.")


@contextlib.asynccontextmanager
async def _open(profile: LabProfile,
                progress: ProgressFn) -> AsyncIterator[tuple[LabSession, PlacePool | None]]:
    """The loop's session: on a fleet, a home session and its places; else the one DUT's."""
    if is_fleet(profile):
        async with open_fleet(profile, client="loop") as (home, places):
            home.progress = progress
            yield home, places
    else:
        async with open_lab(profile, progress=progress, client="loop") as ctx:
            yield ctx, None


async def _quiet(done: float, total: float | None, message: str) -> None:
    """Progress nobody asked to see."""


def _with_calibration(text: str, line: str) -> str:
    """summary.md with the night's calibration under its first line of facts (the stop)."""
    head, sep, rest = text.partition("\n- **Sessions:**")
    return f"{head}\n- **Calibration:** {line}{sep}{rest}" if sep else f"{text}\n- **Calibration:** {line}\n"


@dataclass
class LoopResult:
    session_id: str
    outcome: Outcome
    summary: Path
    report: Path


async def run_loop(profile: LabProfile, model: Model, *, goal: str | None, limits: Limits,
                   out_dir: Path | None, resume: str | None, hooks: Hooks | None = None,
                   progress: ProgressFn | None = None, on_start: StartFn | None = None,
                   auto_resume: bool = True,
                   calibration: calibrated.CalibrationPolicy | None = None) -> LoopResult:
    """Run the loop to its stop and write its summary and report. The run owns `model` (made by
    the caller, so a missing API key fails before the lab is opened) and closes it. Without
    `resume`, an unfinished run of the same goal and lab is resumed (unless `auto_resume` is
    off). Before the model's first turn the night's calibration is found or made
    (agent/calibrated.py, `calibration`: its age and whether it is skipped); an undecidable rule
    raises calibrated.Undecidable and nothing else runs."""
    policy = calibration or calibrated.CalibrationPolicy()
    try:
        async with _open(profile, progress or _quiet) as (ctx, places):
            assert ctx.transcript is not None and ctx.session_id is not None
            store, sid = ctx.transcript, ctx.session_id
            chain: list[str] = []
            config: dict[str, object] = {"mode": "loop", "model": model.options.model,
                                         "lab": profile.source, "pid": os.getpid(),
                                         "host": socket.gethostname()}
            if resume is None and auto_resume and goal:
                resume = unfinished(store, goal, profile.source, skip=sid)
                if resume is not None:
                    ctx.log(Note(author="labwarden", text=f"found unfinished run {resume} of this "
                                 "goal on this lab: resuming it"))
            if resume:
                saved = saved_state(store, resume)
                goal = goal or str(saved.config.get("goal") or "")
                if limits.budget_usd is None and saved.config.get("budget_usd") is not None:
                    limits.budget_usd = float(saved.config["budget_usd"])
                if limits.until is None and saved.config.get("until"):
                    limits.until = datetime.fromisoformat(str(saved.config["until"]))
                model.totals.carried_usd, model.totals.carried_tokens = saved.spent_usd, saved.tokens
                messages: list[Message] = resumed_messages(saved)
                chain = saved.chain
                config |= {"resumed_from": saved.session_id, "chain": chain,
                           "carried_usd": saved.spent_usd, "carried_tokens": saved.tokens}
                ctx.log(Note(author="labwarden", text=f"resumes session {saved.session_id} "
                             f"({len(saved.messages)} messages, ${saved.spent_usd:.4f} spent before)"))
                took = await take_over_lease(ctx, chain) if places is None else None
                if took:
                    ctx.log(Note(author="labwarden", text=f"took over the DUT lease of {took} (resumed)"))
            if not goal:
                raise TranscriptError("no goal", "pass --goal (or --resume a loop session)")
            on_call = hooks.on_tool_end if hooks is not None else None
            cal = await calibrated.ensure(ctx, policy, fleet=places is not None, on_call=on_call)
            config["calibration"] = {k: v for k, v in cal.items() if k != "line"}
            config |= {"goal": goal, "budget_usd": limits.budget_usd,
                       "until": limits.until.isoformat() if limits.until else None}
            if not resume:
                fleet = await places.good_places() if places is not None else None
                messages = [{"role": "user", "content": kickoff(goal, limits, fleet)}]
            if model.options.retry_until is None:
                model.options.retry_until = limits.until or datetime.now().astimezone() + PATIENCE
            agent = Agent(ctx, model, system_prompt(goal, ctx.profile), hooks=hooks,
                          messages=messages, places=places)
            agent.note(CONFIG, config)
            agent.note_state()  # the start is resumable too
            if on_start is not None:
                on_start(sid, chain)
            outcome = await agent.run(limits, unattended=True)
            agent.note(STOP, {"stop": outcome.stop, "detail": outcome.detail})
            target = out_dir or ctx.data_dir / "loops" / sid
            db = store.path
        # written once the session has ended: its anchor (head hash, kept outside the
        # database) exists, and the summary names it
        target.mkdir(parents=True, exist_ok=True)
        with TranscriptStore(db) as ended:
            report = target / "report.html"
            report.write_text(summary.html_report(ended, [sid, *chain], f"labwarden loop: {goal}",
                                                  ctx.data_dir, ctx.profile.target.uprobes))
            md = target / "summary.md"
            text = summary.markdown(ended, [sid, *chain], goal=goal, stop=outcome.stop,
                                    detail=outcome.detail, final_text=outcome.final_text,
                                    report=report, data_dir=ctx.data_dir)
            md.write_text(_with_calibration(text, cal["line"]))
        return LoopResult(session_id=sid, outcome=outcome, summary=md, report=report)
    finally:
        await model.close()
